"""The issue's reproduction through `cronfleet run-all` (API, scheduler, worker, reaper as
processes, real PostgreSQL and Kafka): a tenant's command job is refused unless the
operator allowed it; where allowed, the command runs as the operator's run-as user and
sees neither the worker's environment nor its files; and a permission the operator
withdraws holds for a job written before (issue 7, item 1). Its working directory is
the run's own or one the operator allowed, entered as the run-as user; its environment
only names the operator allowed and never one that runs code; and a root worker runs
no command of a tenant without a run-as user (issue 27, items 1-3).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from kit.settings import Settings, stack_env_file
from kit.store.tokens import token_create
from tests.integration.test_life_of_a_run import RunAll, prefix, run_all, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="a run-as user needs a worker running as root"),
]
__all__ = ["prefix", "run_all"]  # fixtures of test_life_of_a_run, with this module's env

SECRET = "do-not-leak-8f2c1e"
POLICY = """
[tenants.acme]
commands = ["/bin/sh"]
run_as = "nobody"

[tenants.beta]
commands = ["/bin/sh"]
run_as = "nobody"
"""
# acme's box: its directories below {srv}; its names APP_* and, to show they do not let
# the always-refused names through, B*, S*, P*, G*. rooty has no run_as.
BOX_POLICY = """
[tenants.acme]
commands = ["/bin/sh", "/bin/bash"]
run_as = "nobody"
cwd = ["{srv}"]
env = ["APP_*", "B*", "S*", "P*", "G*"]

[tenants.rooty]
commands = ["/bin/sh"]
"""


@pytest.fixture
def fake_home() -> Iterator[Path]:
    """A CRONFLEET_HOME whose stack.env holds a secret, with the modes `stack up` gives
    (kit.stack.private; as 0710 with the postgres group, nobody else may pass)."""
    home = Path(tempfile.mkdtemp(prefix="cf-home-"))
    home.chmod(0o700)
    real = stack_env_file().read_text()  # the stack's own settings, and one secret more
    (home / "stack.env").write_text(f"{real}CRONFLEET_STACK_SECRET={SECRET}\n")
    (home / "stack.env").chmod(0o600)
    yield home
    shutil.rmtree(home)


@pytest.fixture
def srv(shared_dir: Path) -> Path:
    """The directories the operator allows acme: `work` (its own) and, inside a 0700
    root directory, `private/inner` (0755) with a file `su nobody -c cat` cannot read."""
    (shared_dir / "work").mkdir(mode=0o777)
    (shared_dir / "work").chmod(0o777)
    (shared_dir / "work" / "data.txt").write_text("hello\n")
    inner = shared_dir / "private" / "inner"
    inner.mkdir(parents=True)
    inner.parent.chmod(0o700)
    inner.chmod(0o755)
    (inner / "secret.txt").write_text(f"{SECRET}\n")
    (inner / "secret.txt").chmod(0o644)
    return shared_dir


@pytest.fixture
def policy_file(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    path = tmp_path / "tasks.toml"
    box = "srv" in request.fixturenames
    path.write_text(BOX_POLICY.format(srv=request.getfixturevalue("srv")) if box else POLICY)
    return path


@pytest.fixture
def env(settings: Settings, db_url: str, fake_home: Path, policy_file: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CRONFLEET_HOME": str(fake_home),
        "CRONFLEET_TASK_POLICY_FILE": str(policy_file),
        "CRONFLEET_DATABASE_URL": db_url,
        "CRONFLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CRONFLEET_RUN_TOPIC_PARTITIONS": "1",
        "CRONFLEET_REAPER_PERIOD_MS": "500",
        "CRONFLEET_LOG_LEVEL": "WARNING",
    }


def bearer(engine: Engine, tenant: str, *scopes: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_create(engine, tenant, scopes).token}"}


def one_off(name: str, script: str, in_s: int, shell: str = "/bin/sh", **task: Any) -> dict:
    at = (datetime.now(UTC) + timedelta(seconds=in_s)).replace(microsecond=0)
    return {
        "name": name,
        "schedule": {"at": at.isoformat()},
        "task": {"type": "command", "argv": [shell, "-c", script], **task},
        "retry": {"max_attempts": 1},
    }


def finished_run(ra: RunAll, job_id: str, headers: dict[str, str]) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        assert ra.proc.poll() is None, ra.output()
        runs = ra.http.get(f"/v1/jobs/{job_id}/runs", headers=headers).json()["runs"]
        done = [r for r in runs if r["status"] in ("succeeded", "dead", "retry_scheduled")]
        return done[0] if done else None

    return wait_until(f"a finished run of job {job_id}", finished, detail=ra.output)


def test_a_tenants_command_is_the_operators_decision_and_sees_no_secret(
    run_all: Callable[..., RunAll],
    engine: Engine,
    fake_home: Path,
    policy_file: Path,
    tmp_path: Path,
) -> None:
    ra = run_all()
    ra.wait_healthy()

    # 1. The reproduction: a read+write token, a command that prints stack.env.
    writer = bearer(engine, "acme", "read", "write")
    repro = one_off("repro", "cat $HOME/.cronfleet/stack.env >&2; exit 1", 3)
    refused = ra.http.post("/v1/jobs", json=repro, headers=writer)
    assert refused.status_code == 403, refused.text
    assert "'command' scope" in refused.text

    # 2. Allowed by the operator: it runs as nobody and reads nothing of the worker's.
    commander = bearer(engine, "acme", "read", "write", "command")
    script = (
        "id -un >&2; echo home=$HOME >&2; cat $HOME/.cronfleet/stack.env >&2 2>&1; "
        f"cat {fake_home}/stack.env >&2 2>&1; cat /proc/$PPID/environ >&2 2>&1; "
        "env | grep -c CRONFLEET_DATABASE >&2; exit 1"
    )
    allowed = ra.http.post("/v1/jobs", json=one_off("probe", script, 3), headers=commander)
    assert allowed.status_code == 201, allowed.text

    # 3. Allowed when written, withdrawn before it runs: the worker refuses it.
    marker = tmp_path / "ran"
    beta = bearer(engine, "beta", "read", "write", "command")
    late = one_off("late", f"touch {marker}", 6)
    written = ra.http.post("/v1/jobs", json=late, headers=beta)
    assert written.status_code == 201, written.text
    policy_file.write_text(POLICY.split("[tenants.beta]")[0])

    run = finished_run(ra, allowed.json()["job_id"], commander)
    error = run["error"] or ""
    assert error.startswith("exit code 1; stderr: nobody"), error
    assert SECRET not in error and "CRONFLEET_DATABASE_URL" not in error
    assert "home=/tmp/" in error and ".cronfleet/stack.env: No such file" in error
    assert error.count("Permission denied") >= 2, error  # stack.env, the worker's environ
    assert error.rstrip().endswith("0"), error  # no CRONFLEET_DATABASE* in its environment

    late_run = finished_run(ra, written.json()["job_id"], beta)
    assert "refused by the operator's task policy" in (late_run["error"] or ""), late_run
    assert not marker.exists()


def test_a_tenants_command_stays_in_its_box(
    run_all: Callable[..., RunAll],
    engine: Engine,
    fake_home: Path,
    srv: Path,
    tmp_path: Path,
    row_counts: Callable[[], dict[str, int]],
) -> None:
    """The reproductions of issue 27 (items 1-3) as a new user would try them."""
    ra = run_all()
    ra.wait_healthy()
    acme = bearer(engine, "acme", "read", "write", "command")
    ran = srv / "ran"  # a command that starts leaves a line here

    # 1. cwd: outside the operator's directories refused, in the same words whatever is
    # there (a root-only directory, $CRONFLEET_HOME, a file, nothing), nothing written.
    outside = tmp_path / "private" / "inner"
    outside.mkdir(parents=True)
    outside.parent.chmod(0o700)
    outside.chmod(0o755)
    before = row_counts()
    not_allowed = f"is not a directory the operator allowed for tenant 'acme' (allowed: {srv})"
    for cwd in (outside, fake_home, fake_home / "stack.env", fake_home / "no-such-dir"):
        job = one_off("cwd-out", f"echo cwd >> {ran}; ls; cat stack.env", 3, cwd=str(cwd))
        answer = ra.http.post("/v1/jobs", json=job, headers=acme)
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["fields"] == [{"field": "task.cwd", "reason": not_allowed}]
    assert row_counts() == before

    # Inside them, a directory the run-as user may not enter: the command never starts.
    inner = srv / "private" / "inner"
    locked = one_off("cwd-locked", f"echo cwd >> {ran}; cat secret.txt", 3, cwd=str(inner))
    locked_id = _created(ra, locked, acme)
    probe = "pwd >&2; cat data.txt >&2; id -un >&2; exit 1"
    own_id = _created(ra, one_off("cwd-own", probe, 3, cwd=str(srv / "work")), acme)

    # 2. env: names that make bash run code are refused for every tenant (422), even
    # where the operator's prefixes (B*, S*, P*, G*) match; names off the list are 403.
    bomb = f"$(echo env >> {ran})"
    code_runners = [
        {"BASH_ENV": bomb},
        {"SHELLOPTS": "xtrace", "PS4": bomb},
        {"GLIBC_TUNABLES": "glibc.malloc.check=3"},
    ]
    before = row_counts()
    for env in code_runners:
        job = one_off("env", "true", 3, "/bin/bash", env=env)
        answer = ra.http.post("/v1/jobs", json=job, headers=acme)
        assert answer.status_code == 422, answer.text
        fields = [f["field"] for f in answer.json()["error"]["fields"]]
        assert fields == [f"task.env.{next(iter(env))}"], answer.text
    off_list = ra.http.post(
        "/v1/jobs", json=one_off("env", "true", 3, env={"OTHER": "1"}), headers=acme
    )
    assert off_list.status_code == 403 and "task.env.OTHER" in off_list.text, off_list.text
    assert row_counts() == before

    # Written to the database behind the API's back: the worker refuses them.
    direct = []
    for index, env in enumerate(code_runners):
        job_id = _created(ra, one_off(f"direct-{index}", "true", 6, "/bin/bash"), acme)
        spec = {"type": "command", "argv": ["/bin/bash", "-c", f"echo direct >> {ran}"]}
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE jobs SET task_spec = CAST(:spec AS jsonb) WHERE job_id = :id"),
                {"spec": json.dumps({**spec, "env": env}), "id": job_id},
            )
        direct.append((job_id, env))

    # 3. A permit without run_as, on a worker running as root: refused at run time.
    rooty = bearer(engine, "rooty", "read", "write", "command")
    rooty_id = _created(ra, one_off("as-root", f"id -u >> {ran}", 3), rooty)

    locked_run = finished_run(ra, locked_id, acme)
    assert SECRET not in (locked_run["error"] or "")
    assert "Permission denied" in (locked_run["error"] or ""), locked_run
    own = finished_run(ra, own_id, acme)["error"] or ""
    assert own == f"exit code 1; stderr: {srv / 'work'}\nhello\nnobody", own
    for job_id, env in direct:  # jsonb keeps its own key order: either name may be named
        error = finished_run(ra, job_id, acme)["error"] or ""
        refused = "refused by the operator's task policy: task.env.{}: is never a name a job"
        assert any(error.startswith(refused.format(n)) for n in env), error
    root_error = finished_run(ra, rooty_id, rooty)["error"] or ""
    assert root_error == (
        "refused by the operator's task policy: tenant 'rooty' has no run_as user and this "
        "worker runs as root, so it runs none of its commands (give it a run_as user)"
    )
    assert not ran.exists(), ran.read_text()


def _created(ra: RunAll, job: dict[str, Any], headers: dict[str, str]) -> str:
    answer = ra.http.post("/v1/jobs", json=job, headers=headers)
    assert answer.status_code == 201, answer.text
    return answer.json()["job_id"]
