"""The issue's reproduction through `cronfleet run-all` (API, scheduler, worker, reaper as
processes, real PostgreSQL and Kafka): a tenant's command job is refused unless the
operator allowed it; where allowed, the command runs as the operator's run-as user and
sees neither the worker's environment nor its files; and a permission the operator
withdraws holds for a job written before (issue 7, item 1).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

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


@pytest.fixture
def fake_home() -> Iterator[Path]:
    """A CRONFLEET_HOME whose stack.env holds a secret, with the modes `stack up` gives."""
    home = Path(tempfile.mkdtemp(prefix="cf-home-"))
    home.chmod(0o711)
    real = stack_env_file().read_text()  # the stack's own settings, and one secret more
    (home / "stack.env").write_text(f"{real}CRONFLEET_STACK_SECRET={SECRET}\n")
    (home / "stack.env").chmod(0o600)
    yield home
    shutil.rmtree(home)


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.toml"
    path.write_text(POLICY)
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


def one_off(name: str, script: str, in_s: int) -> dict[str, Any]:
    at = (datetime.now(UTC) + timedelta(seconds=in_s)).replace(microsecond=0)
    return {
        "name": name,
        "schedule": {"at": at.isoformat()},
        "task": {"type": "command", "argv": ["/bin/sh", "-c", script]},
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
