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
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing identity needs root")


def ctx(permit: CommandPermit | None, **kw: object) -> RunContext:
    return RunContext("run-1", 1, 30.0, tenant="acme", commands=permit, **kw)  # type: ignore[arg-type]


def test_without_a_permit_no_command_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = execute({"type": "command", "argv": [SH, "-c", f"touch {marker}"]}, ctx(None))
    assert not result.ok
    assert "not allowed for tenant 'acme'" in (result.error or "")
    assert not marker.exists()


@pytest.mark.parametrize("argv0", ["sh", "/usr/bin/sh", "/bin/sh ", "/bin//sh"])
def test_argv0_must_be_an_allowed_executable_exactly(tmp_path: Path, argv0: str) -> None:
    marker = tmp_path / "ran"
    permit = CommandPermit(frozenset({SH}))
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
    seen = _environment(
        CommandPermit(frozenset({PY})), {"LD_PRELOAD": "/tmp/x.so", "CRONFLEET_HOME": "/x"}
    )
    env, cwd = seen["env"], seen["cwd"]
    assert env["HOME"] == env["TMPDIR"] == cwd
    assert "cronfleet-run-" in cwd and not Path(cwd).exists()
    assert "LD_PRELOAD" not in env
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
    assert not result.ok and reason in (result.error or "")
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
    result = execute(spec, ctx(CommandPermit(frozenset({PY})), secrets=(secret,)))
    assert not result.ok
    error = result.error or ""
    assert "whole:" + MASK in error
    assert "kkkkkkkk" not in error  # no fragment of the secret either


def test_run_task_scrubs_the_jobs_secret_env_and_the_workers_database_password() -> None:
    policy = TaskPolicy.parse({"tenants": {"acme": {"commands": [SH]}}})
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
    policy = TaskPolicy.parse({"tenants": {"acme": {"commands": [SH]}}})
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
    path.write_text(f'[tenants.acme]\ncommands = ["{SH}"]\n')
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
