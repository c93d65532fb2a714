"""A command runs only as the operator allowed it, and sees nothing of the worker
(issue 7, item 1): no permit, no run; argv[0] on the tenant's allow-list exactly; the
run-as user's identity; a fresh HOME and working directory; the job's secret values
and the worker's own scrubbed from what is recorded (item 3)."""

from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path

import pytest

from kit.core.redaction import MASK
from kit.core.task_policy import CommandPermit, TaskPolicy
from kit.tasks import RunContext, execute
from kit.tasks.command import EXCERPT_BYTES
from kit.tasks.policy import PolicySource, read_policy, run_task

PY = sys.executable
SH = "/bin/sh"
BASH = "/bin/bash"
# A root worker runs commands only as a run-as user; any other user runs them as itself.
RUN_AS = "nobody" if os.geteuid() == 0 else None
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing identity needs root")


RUN_AS_LINE = f'run_as = "{RUN_AS}"\n' if RUN_AS else ""


def tenant_entry(commands: list[str], **more: object) -> dict[str, object]:
    """A tenant's entry of the policy, with the run-as user this worker needs."""
    return {"commands": commands, **({"run_as": RUN_AS} if RUN_AS else {}), **more}


def ctx(permit: CommandPermit | None, **kw: object) -> RunContext:
    return RunContext("run-1", 1, 30.0, tenant="acme", commands=permit, **kw)  # type: ignore[arg-type]


def test_without_a_permit_no_command_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = execute({"type": "command", "argv": [SH, "-c", f"touch {marker}"]}, ctx(None))
    assert not result.ok
    assert "not allowed for tenant 'acme'" in (result.error or "")
    assert not marker.exists()


@pytest.mark.parametrize("argv0", ["sh", "/usr/bin/sh", "/bin/sh ", "/bin//sh"])
def test_argv0_must_be_an_allowed_executable_exactly(shared_dir: Path, argv0: str) -> None:
    marker = shared_dir / "ran"
    permit = CommandPermit(frozenset({SH}), run_as=RUN_AS)
    result = execute({"type": "command", "argv": [argv0, "-c", f"touch {marker}"]}, ctx(permit))
    assert not result.ok and "task.argv[0]" in (result.error or ""), result
    assert not marker.exists()
    assert execute({"type": "command", "argv": [SH, "-c", f"touch {marker}"]}, ctx(permit)).ok
    assert marker.exists()


def _environment(permit: CommandPermit, spec_env: dict[str, str] | None = None) -> dict:
    code = "import json, os; print(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd()}))"
    spec = {"type": "command", "argv": [PY, "-c", code], "env": spec_env or {}}
    result = execute(spec, ctx(permit))
    assert result.ok, result
    return json.loads((result.detail or "").split("stdout: ", 1)[1])


def test_home_tmpdir_and_cwd_are_a_fresh_run_directory_removed_afterwards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", "/root")
    monkeypatch.setenv("CRONFLEET_HOME", "/root/.cronfleet")
    seen = _environment(CommandPermit(frozenset({PY}), run_as=RUN_AS))
    env, cwd = seen["env"], seen["cwd"]
    assert env["HOME"] == env["TMPDIR"] == cwd
    assert "cronfleet-run-" in cwd and not Path(cwd).exists()
    assert "CRONFLEET_HOME" not in env


@as_root
def test_run_as_user_cannot_read_the_workers_files(tmp_path: Path) -> None:
    """The issue's reproduction, as the operator configures it: the command tries the
    stack's connection file and the worker's environment, and gets neither."""
    home = tmp_path / "cronfleet-home"
    home.mkdir()
    home.chmod(0o711)
    stack_env = home / "stack.env"
    stack_env.write_text("CRONFLEET_DATABASE_URL=postgresql+psycopg://u:topsecret@db/x\n")
    stack_env.chmod(0o600)
    script = (
        f"id -u; id -G; cat {stack_env} 2>&1; cat /proc/{os.getpid()}/environ 2>&1; "
        "stat -c %U .; exit 0"
    )
    permit = CommandPermit(frozenset({SH}), run_as="nobody")
    result = execute({"type": "command", "argv": [SH, "-c", script]}, ctx(permit))
    assert result.ok, result
    out = result.detail or ""
    nobody = pwd.getpwnam("nobody")
    lines = out.split("stdout: ", 1)[1].splitlines()
    assert lines[0] == str(nobody.pw_uid)
    assert lines[1].split() == [str(nobody.pw_gid)]  # no supplementary groups
    assert "topsecret" not in out and "Permission denied" in out
    assert "CRONFLEET" not in out
    assert lines[-1] == "nobody"  # the run directory is the run-as user's


@pytest.mark.parametrize(
    ("run_as", "reason"), [("root", "is root"), ("no-such-user-x", "does not exist")]
)
def test_run_as_root_or_unknown_is_refused(tmp_path: Path, run_as: str, reason: str) -> None:
    marker = tmp_path / "ran"
    permit = CommandPermit(frozenset({SH}), run_as=run_as)
    result = execute({"type": "command", "argv": [SH, "-c", f"touch {marker}"]}, ctx(permit))
    assert not result.ok and reason in (result.error or ""), result
    assert not marker.exists()


def test_secret_values_are_scrubbed_from_stderr_even_across_the_excerpt_cut() -> None:
    secret = "s3cr3t-" + "k" * 40
    # the secret sits across the start of the excerpt: only its tail would be kept
    pad = EXCERPT_BYTES - 20
    code = (
        "import sys; s = sys.argv[1]; "
        f"sys.stderr.write('x' * 5000 + s + 'y' * {pad} + ' whole:' + s); sys.exit(1)"
    )
    spec = {"type": "command", "argv": [PY, "-c", code, secret]}
    result = execute(spec, ctx(CommandPermit(frozenset({PY}), run_as=RUN_AS), secrets=(secret,)))
    assert not result.ok
    error = result.error or ""
    assert "whole:" + MASK in error
    assert "kkkkkkkk" not in error  # no fragment of the secret either


def test_run_task_scrubs_the_jobs_secret_env_and_the_workers_database_password() -> None:
    policy = TaskPolicy.parse({"tenants": {"acme": tenant_entry([SH], env=["API_TOKEN"])}})
    spec = {
        "type": "command",
        "argv": [SH, "-c", 'echo "token=$API_TOKEN db=$1" >&2; exit 1', "x", "pg-pass-1234"],
        "env": {"API_TOKEN": "tok-abcdef-123"},
        "secret_env": ["API_TOKEN"],
    }
    worker = ("postgresql+psycopg://cronfleet:pg-pass-1234@127.0.0.1/db", "pg-pass-1234")
    result = run_task(spec, RunContext("r", 1, 30.0, tenant="acme"), policy, worker)
    assert not result.ok
    assert result.error == f"exit code 1; stderr: token={MASK} db={MASK}"


def test_run_task_follows_the_tenants_policy(tmp_path: Path) -> None:
    policy = TaskPolicy.parse({"tenants": {"acme": tenant_entry([SH])}})
    spec = {"type": "command", "argv": [SH, "-c", "exit 0"]}
    assert run_task(spec, RunContext("r", 1, 30.0, tenant="acme"), policy).ok
    rival = run_task(spec, RunContext("r", 1, 30.0, tenant="rival"), policy)
    assert not rival.ok and "not allowed for tenant 'rival'" in (rival.error or "")


def test_a_withdrawn_permission_holds_for_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker re-reads the operator's file: a job written while commands were
    allowed does not run once they are not."""
    monkeypatch.setattr("kit.tasks.policy.RECHECK_S", 0.0)
    path = tmp_path / "tasks.toml"
    path.write_text(f'[tenants.acme]\ncommands = ["{SH}"]\n{RUN_AS_LINE}')
    source = PolicySource(path)
    spec = {"type": "command", "argv": [SH, "-c", "exit 0"]}
    assert run_task(spec, RunContext("r", 1, 30.0, tenant="acme"), source.current()).ok
    path.write_text("[tenants.acme]\n")
    os.utime(path, ns=(1, 1))  # a different mtime even within the clock's granularity
    refused = run_task(spec, RunContext("r", 1, 30.0, tenant="acme"), source.current())
    assert not refused.ok and "not allowed" in (refused.error or "")
    path.write_text("[tenants.acme\nbroken")  # an invalid edit fails closed
    os.utime(path, ns=(2, 2))
    assert source.current().for_tenant("acme").commands is None


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('[tenants.acme]\ncommands = ["sh"]\n', "tenants.acme.commands[0]"),
        ('[tenants.acme]\ncommands = ["/bin/sh"]\nrun_as = "root"\n', "tenants.acme.run_as"),
        ('[tenants.acme]\nrun_as = "nobody"\n', "tenants.acme.run_as"),
        ("[tenants.acme]\nshell = true\n", "tenants.acme.shell"),
        ('[tenants.acme]\nhttp_allow_hosts = ["10.0.0.0/33"]\n', "http_allow_hosts"),
        ("[tenants.acme\n", "not valid TOML"),
    ],
)
def test_a_bad_policy_file_names_the_entry(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "tasks.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match="task_policy_file") as caught:
        read_policy(path)
    assert where in str(caught.value)


def test_a_service_started_with_a_bad_policy_file_exits_2_naming_the_entry(
    tmp_path: Path,
) -> None:
    import subprocess

    path = tmp_path / "tasks.toml"
    path.write_text('[tenants.acme]\ncommands = ["sh"]\n')
    env = {**os.environ, "CRONFLEET_TASK_POLICY_FILE": str(path)}
    done = subprocess.run(
        [PY, "-m", "kit.cli", "api", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"cronfleet api: task_policy_file: {path}: tenants.acme.commands[0]: "
        "must be an absolute path"
    ]


# --- the working directory: the run's own, or one the operator allowed, entered as the
# run-as user


@pytest.fixture
def root_only(tmp_path: Path) -> Path:
    """A directory inside a 0700 root-owned one, holding a secret that `su nobody -c cat`
    cannot read: only the outer directory keeps others out."""
    inner = tmp_path / "private" / "inner"
    inner.mkdir(parents=True)
    inner.parent.chmod(0o700)
    inner.chmod(0o755)
    (inner / "secret.txt").write_text("root-only-7d1c\n")
    (inner / "secret.txt").chmod(0o644)
    return inner


@as_root
def test_a_cwd_inside_a_root_only_directory_does_not_read_it(root_only: Path) -> None:
    """The issue's reproduction: `cwd` into a 0700 root directory, `cat` a file by its
    relative name. Not allowed by the policy: refused before anything starts."""
    permit = CommandPermit(frozenset({SH}), run_as="nobody")
    spec = {"type": "command", "argv": [SH, "-c", "cat secret.txt; ls"], "cwd": str(root_only)}
    result = execute(spec, ctx(permit))
    assert not result.ok, result
    assert "root-only-7d1c" not in f"{result.error}{result.detail}"
    assert result.error == (
        "refused by the operator's task policy: task.cwd: is not a directory the operator "
        "allowed for tenant 'acme' (allowed: none)"
    )


@as_root
def test_an_allowed_cwd_is_entered_as_the_run_as_user(root_only: Path, shared_dir: Path) -> None:
    """Allowed by the operator (its parent, say), the directory is still entered after
    the user switch: the run-as user's permissions decide, and the command never starts."""
    marker = shared_dir / "ran"
    permit = CommandPermit(frozenset({SH}), run_as="nobody", cwd=(str(root_only.parent.parent),))
    script = f"touch {marker}; cat secret.txt"
    result = execute(
        {"type": "command", "argv": [SH, "-c", script], "cwd": str(root_only)}, ctx(permit)
    )
    assert not result.ok and "root-only-7d1c" not in f"{result.error}{result.detail}"
    assert "Permission denied" in (result.error or ""), result
    assert not marker.exists()
    own = shared_dir / "own"
    own.mkdir()
    own.chmod(0o777)
    (own / "data.txt").write_text("hello\n")
    permit = CommandPermit(frozenset({SH}), run_as="nobody", cwd=(str(shared_dir),))
    spec = {"type": "command", "argv": [SH, "-c", "pwd; cat data.txt; id -un"], "cwd": str(own)}
    result = execute(spec, ctx(permit))
    assert result.ok, result
    assert (result.detail or "").split("stdout: ", 1)[1].split() == [str(own), "hello", "nobody"]


@pytest.mark.parametrize("cwd", ["{home}", "{home}/stack.env", "{home}/no-such-dir", "/"])
def test_a_cwd_the_policy_does_not_allow_is_refused_alike_whether_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cwd: str
) -> None:
    """cwd = $CRONFLEET_HOME listed its files; the errors told which paths exist. Now
    every refusal has the same words, whatever is (or is not) at the path."""
    home = tmp_path / "cronfleet-home"
    home.mkdir()
    (home / "stack.env").write_text("CRONFLEET_DATABASE_URL=postgresql://u:pw@db/x\n")
    monkeypatch.setenv("CRONFLEET_HOME", str(home))
    permit = CommandPermit(frozenset({SH}), run_as=RUN_AS, cwd=("/srv/acme",))
    spec = {"type": "command", "argv": [SH, "-c", "ls -a"], "cwd": cwd.format(home=home)}
    result = execute(spec, ctx(permit))
    assert not result.ok and result.detail is None
    assert result.error == (
        "refused by the operator's task policy: task.cwd: is not a directory the operator "
        "allowed for tenant 'acme' (allowed: /srv/acme)"
    )


# --- the environment: the operator's allow-list; what the kit always refuses


@pytest.mark.parametrize(
    "env",
    [
        {"BASH_ENV": "$(touch {marker})"},
        {"SHELLOPTS": "xtrace", "PS4": "$(touch {marker})"},
        {"GLIBC_TUNABLES": "glibc.malloc.check=3"},
        {"LD_PRELOAD": "/tmp/x.so"},
        {"CRONFLEET_HOME": "/x"},
        {"PATH": "/tmp"},
        {"BASH_FUNC_echo": "() { touch {marker}; }"},
    ],
    ids=[
        "BASH_ENV",
        "SHELLOPTS+PS4",
        "GLIBC_TUNABLES",
        "LD_PRELOAD",
        "CRONFLEET",
        "PATH",
        "BASH_FUNC",
    ],
)
def test_environment_names_that_run_code_never_reach_an_allowed_bash(
    shared_dir: Path, env: dict[str, str]
) -> None:
    """The issue's reproduction: an allowed bash wrapper, the job's env making bash run
    the job's code. Refused at run time, even where the operator's allow-list would match
    the name: the command never starts."""
    marker = shared_dir / "ran"
    permit = CommandPermit(
        frozenset({BASH}), run_as=RUN_AS, env=("B*", "S*", "P*", "G*", "L*", "C*")
    )
    spec = {
        "type": "command",
        "argv": [BASH, "-c", f"echo wrapper >> {shared_dir / 'wrapper'}"],
        "env": {k: v.replace("{marker}", str(marker)) for k, v in env.items()},
    }
    result = execute(spec, ctx(permit))
    assert not result.ok, result
    name = next(iter(env))  # the first name the worker looks at
    assert (result.error or "").startswith(
        f"refused by the operator's task policy: task.env.{name}: is never a name a job may set"
    ), result
    assert not marker.exists() and not (shared_dir / "wrapper").exists()


def test_only_the_names_the_operator_allows_reach_the_command() -> None:
    permit = CommandPermit(frozenset({PY}), run_as=RUN_AS, env=("APP_*", "REPORT_DATE"))
    seen = _environment(permit, {"APP_MODE": "x", "REPORT_DATE": "2030-01-01"})
    assert (seen["env"]["APP_MODE"], seen["env"]["REPORT_DATE"]) == ("x", "2030-01-01")
    for name in ("OTHER", "REPORT_DATE_X", "app_mode"):
        spec = {"type": "command", "argv": [PY, "-c", "pass"], "env": {name: "1"}}
        result = execute(spec, ctx(permit))
        assert result.error == (
            f"refused by the operator's task policy: task.env.{name}: is not a name the "
            "operator allowed tenant 'acme' to set (allowed: APP_*, REPORT_DATE)"
        ), result
    nothing = CommandPermit(frozenset({PY}), run_as=RUN_AS)
    result = execute(
        {"type": "command", "argv": [PY, "-c", "pass"], "env": {"A": "1"}}, ctx(nothing)
    )
    assert (result.error or "").endswith("to set (allowed: none)")


# --- a root worker runs no command of a tenant without a run_as user


@as_root
def test_a_root_worker_refuses_a_permit_without_run_as(shared_dir: Path) -> None:
    marker = shared_dir / "ran"
    permit = CommandPermit(frozenset({SH}))
    result = execute({"type": "command", "argv": [SH, "-c", f"id -u > {marker}"]}, ctx(permit))
    assert not result.ok and not marker.exists(), marker.exists() and marker.read_text()
    assert result.error == (
        "refused by the operator's task policy: tenant 'acme' has no run_as user and this "
        "worker runs as root, so it runs none of its commands (give it a run_as user)"
    )
