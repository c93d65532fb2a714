"""The life of a run through the real services as processes: `cronfleet run-all`, or
scheduler, worker and reaper started one by one, on the real PostgreSQL and Kafka.

Each test has its own database (conftest) and its own topic prefix and consumer group.
Every wait has a deadline; lags are bounded generously (seconds), never timed tightly.
Worker SIGKILL recovery is in test_worker_e2e.py and not repeated here.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.admin import AdminClient
from sqlalchemy import Engine, text

from kit.core.policies import MisfirePolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import OneOffSchedule, parse_schedule
from kit.runall import Fleet, Service
from kit.settings import Settings
from kit.store.jobs import JobCreate, JobSpec, job_create, jobs_create_batch
from kit.worker.journal import read_journal
from tests.integration import waiting
from tests.integration.test_scheduler import messages

pytestmark = pytest.mark.integration
WAIT_S = 60.0
LAG_BOUND_S = 10.0  # generous: this machine is shared; the benchmark measures lag


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_run(n: int) -> int:
    """The first of `n` consecutive free ports (run-all's metrics ports are P..P+n-1; a
    busy machine had P+1 taken now and then)."""
    for _ in range(200):
        base = free_port()
        if base + n > 65535:
            continue
        try:
            with contextlib.ExitStack() as held:
                for port in range(base, base + n):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no run of {n} free ports")


def wait_until(
    what: str,
    check: Callable[[], Any],
    timeout_s: float = WAIT_S,
    detail: Callable[[], str] = lambda: "",
) -> Any:
    """tests/integration/waiting.py's, with this file's deadline and a slower poll (the
    services are processes; each poll is a query)."""
    return waiting.wait_until(what, check, timeout_s, detail, poll_s=0.2)


def statuses(engine: Engine) -> str:
    got = rows(engine, "SELECT status, priority, count(*) FROM runs GROUP BY 1, 2 ORDER BY 1, 2")
    return "runs: " + ", ".join(f"{s}/{p}={n}" for s, p, n in got)


def rows(engine: Engine, sql: str, **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(text(sql), params))


def db_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


@pytest.fixture
def prefix(settings: Settings) -> Iterator[str]:
    prefix = f"cf.life.{uuid.uuid4().hex[:10]}"
    yield prefix
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
    if topics:
        for future in admin.delete_topics(topics).values():
            future.result(timeout=10)


@pytest.fixture
def env(settings: Settings, db_url: str) -> dict[str, str]:
    """The services' environment: this test's database, short periods, the tests' task
    policy (tenant acme may run /bin/sh)."""
    return {
        **os.environ,
        "CRONFLEET_TASK_POLICY_FILE": settings.task_policy_file,
        "CRONFLEET_TENANT_POLICY_FILE": settings.tenant_policy_file,
        "CRONFLEET_DATABASE_URL": db_url,
        "CRONFLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CRONFLEET_RUN_TOPIC_PARTITIONS": "1",
        "CRONFLEET_REAPER_PERIOD_MS": "500",
        "CRONFLEET_RUN_LEASE_TTL_MS": "5000",
        "CRONFLEET_LOG_LEVEL": "WARNING",
    }


@pytest.fixture
def fleet(env: dict[str, str]) -> Iterator[Fleet]:
    """Services started one by one; their output is kept for failure messages."""
    fleet = Fleet(out=io.StringIO(), env=env)
    yield fleet
    fleet.stop(timeout_s=30)


def output(fleet: Fleet) -> str:
    return fleet.out.getvalue()  # type: ignore[attr-defined]


def service(name: str, prefix: str, *extra: str) -> Service:
    args: list[str] = [name, "--topic-prefix", prefix, *extra]
    if name == "worker":
        args += ["--group-id", f"g-{prefix}", "--drain-s", "5"]
    return Service(name, tuple(args))


def bulk_one_offs(engine: Engine, at: datetime, n: int, priority: str, task: dict) -> None:
    now = db_now(engine)
    spec = JobSpec(
        name="x",
        schedule=OneOffSchedule(at),
        task=task,
        retry=RetryPolicy().to_dict(),
        misfire=MisfirePolicy().to_dict(),
        priority=priority,
    )
    specs = [JobSpec(**{**spec.__dict__, "name": f"{priority}-{i}"}) for i in range(n)]
    jobs_create_batch(engine, "acme", specs, now=now)


# -- run-all -----------------------------------------------------------------------------


class RunAll:
    """`cronfleet run-all` as a child of the test, its output in a file."""

    def __init__(self, env: dict[str, str], prefix: str, log: Path, *extra: str) -> None:
        self.api_port = free_port()
        self.metrics_port = free_port_run(8)  # scheduler, reaper, workers, maintenance
        self.log = log
        argv = [sys.executable, "-m", "kit.cli", "run-all", "--api-port", str(self.api_port)]
        argv += ["--metrics-base-port", str(self.metrics_port), "--topic-prefix", prefix]
        argv += ["--group-id", f"g-{prefix}", "--drain-s", "5", "--stop-timeout-s", "30", *extra]
        self.proc = subprocess.Popen(
            argv, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.api_port}", timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def child_pids(self) -> dict[str, int]:
        """From run-all's own 'started NAME (pid N)' lines."""
        out: dict[str, int] = {}
        for line in self.output().splitlines():
            if line.startswith("run-all") and "| started " in line:
                words = line.split("| started ", 1)[1].split()
                out[words[0]] = int(words[2].rstrip(")"))
        return out

    def wait_healthy(self) -> None:
        def healthy() -> bool:
            assert self.proc.poll() is None, self.output()
            try:
                return self.http.get("/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_until("the api of run-all", healthy)

    def close(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        for pid in self.child_pids().values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # children lead their own sessions


@pytest.fixture
def run_all(env: dict[str, str], prefix: str, tmp_path: Path) -> Iterator[Callable[..., RunAll]]:
    started: list[RunAll] = []

    def start(*extra: str) -> RunAll:
        ra = RunAll(env, prefix, tmp_path / f"run-all-{len(started)}.log", *extra)
        started.append(ra)
        return ra

    yield start
    for ra in started:
        ra.close()


COMMANDER = ("--scope", "read", "--scope", "write", "--scope", "command")


def token_from_cli(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "kit.cli", "tokens", "create", "--tenant", "acme", *COMMANDER],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def ledger_task(ledger: Path, script: str = "") -> dict[str, Any]:
    """A command that appends its idempotency key to the ledger once `script` passed."""
    body = f'{script}\necho "$CRONFLEET_IDEMPOTENCY_KEY" >> "{ledger}"'
    return {"type": "command", "argv": ["/bin/sh", "-c", body]}


def scrape(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


def test_run_all_runs_a_job_made_through_the_api_and_stops_on_sigterm(
    env: dict[str, str], run_all: Callable[..., RunAll], engine: Engine, shared_dir: Path
) -> None:
    token = token_from_cli(env)
    ra = run_all()
    ra.wait_healthy()
    headers = {"Authorization": f"Bearer {token}"}
    ledger = shared_dir / "ledger"
    at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    body = {"name": "once", "schedule": {"at": at.isoformat()}, "task": ledger_task(ledger)}
    created = ra.http.post("/v1/jobs", json=body, headers=headers)
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]

    def run_of_job() -> str | None:
        page = ra.http.get(f"/v1/jobs/{job_id}/runs", headers=headers).json()
        return page["runs"][0]["run_id"] if page["runs"] else None

    run_id = wait_until("the job's run", run_of_job)

    def succeeded() -> dict | None:
        assert ra.proc.poll() is None, ra.output()
        run = ra.http.get(f"/v1/runs/{run_id}", headers=headers).json()
        return run if run["status"] == "succeeded" else None

    run = wait_until("the run to succeed", succeeded)
    assert datetime.fromisoformat(run["scheduled_at"]) == at
    times = [datetime.fromisoformat(run[k]) for k in ("scheduled_at", "started_at", "finished_at")]
    assert times == sorted(times)  # started at its second or after, never before
    assert ledger.read_text().split() == [run_id]
    # every service serves its metrics on its own port: scheduler P, reaper P+1, worker P+2,
    # maintenance P+3
    assert "cronfleet_runs_published_total" in scrape(ra.metrics_port)
    assert "cronfleet_reaper_runs_total" in scrape(ra.metrics_port + 1)
    worker = scrape(ra.metrics_port + 2)
    assert 'cronfleet_worker_runs_total{outcome="succeeded"} 1.0' in worker
    assert "cronfleet_maintenance_passes_total" in scrape(ra.metrics_port + 3)

    pids = ra.child_pids()
    assert set(pids) == {"api", "scheduler", "reaper", "worker", "maintenance"}, ra.output()
    ra.proc.send_signal(signal.SIGTERM)
    assert ra.proc.wait(timeout=60) == 0, ra.output()
    assert all(gone(pid) for pid in pids.values())
    assert "stopping: signal forwarded" in ra.output()
    # the scheduler left cleanly: leases released, membership gone
    assert rows(engine, "SELECT 1 FROM partition_leases WHERE owner IS NOT NULL") == []
    assert rows(engine, "SELECT 1 FROM scheduler_nodes") == []


def test_run_all_stops_everything_when_a_service_dies(run_all: Callable[..., RunAll]) -> None:
    ra = run_all("--workers", "2")
    ra.wait_healthy()
    pids = wait_until("six services", lambda: len(ra.child_pids()) == 6 and ra.child_pids())
    os.kill(pids["reaper"], signal.SIGKILL)
    assert ra.proc.wait(timeout=60) == 1, ra.output()
    assert all(gone(pid) for pid in pids.values())
    out = ra.output()
    # The first death run-all notices stops the rest. Under a loaded full suite a worker
    # once exited (code 1) in the same instant; the whole output says why if it recurs.
    assert "reaper exited" in out and "exited unexpectedly" in out, "\n" + out


def test_dead_letter_retries_then_replays_through_the_api(
    env: dict[str, str], run_all: Callable[..., RunAll], shared_dir: Path
) -> None:
    """Retry by the real scheduler (the worker's retry trigger), dead after the last
    attempt, inspected and replayed over HTTP, published by the reaper, succeeds once."""
    token = token_from_cli(env)
    headers = {"Authorization": f"Bearer {token}"}
    ra = run_all()
    ra.wait_healthy()
    broken, ledger = shared_dir / "broken", shared_dir / "ledger"
    broken.write_text("yes")
    at = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
    body = {
        "name": "flaky",
        "schedule": {"at": at.isoformat()},
        "task": ledger_task(ledger, f'[ -e "{broken}" ] && exit 7'),
        "retry": {"max_attempts": 2, "base_s": 1, "cap_s": 5, "jitter": "none"},
    }
    created = ra.http.post("/v1/jobs", json=body, headers=headers)
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]

    def run_in(*statuses: str) -> Callable[[], dict | None]:
        def check() -> dict | None:
            assert ra.proc.poll() is None, ra.output()
            page = ra.http.get(f"/v1/jobs/{job_id}/runs", headers=headers).json()
            runs = [r for r in page["runs"] if r["status"] in statuses]
            return runs[0] if runs else None

        return check

    dead = wait_until("the run to go dead", run_in("dead"))
    run_id = dead["run_id"]
    assert dead["attempt"] == 2
    letter = ra.http.get(f"/v1/dead-letters/{run_id}", headers=headers)
    assert letter.status_code == 200
    assert [e["attempt"] for e in letter.json()["errors"]] == [1, 2]
    assert not ledger.exists()

    broken.unlink()  # the target is fixed
    replay = ra.http.post(f"/v1/dead-letters/{run_id}:replay", headers=headers)
    assert replay.status_code == 200, replay.text
    again = ra.http.post(f"/v1/dead-letters/{run_id}:replay", headers=headers)
    assert again.status_code == 409  # the same run is not replayed twice
    done = wait_until("the replayed run to succeed", run_in("succeeded"))
    assert done["run_id"] == run_id and done["attempt"] > 2
    assert ledger.read_text().split() == [run_id]  # the effect, once


# -- services one by one -----------------------------------------------------------------


def test_cron_and_one_off_fire_at_their_second_and_succeed(
    engine: Engine, fleet: Fleet, prefix: str, env: dict[str, str], tmp_path: Path
) -> None:
    journals = tmp_path / "journal"
    env["CRONFLEET_EXECUTION_JOURNAL_DIR"] = str(journals)  # the fleet's env: a line per start
    now = db_now(engine)
    one_off_at = (now + timedelta(seconds=4)).replace(microsecond=0)

    def create(name: str, schedule: Any) -> str:
        spec = JobSpec(
            name=name,
            schedule=schedule,
            task={"type": "noop"},
            retry=RetryPolicy().to_dict(),
            misfire=MisfirePolicy().to_dict(),
        )
        return job_create(engine, JobCreate("acme", spec, now=now)).job.job_id

    tick = create("tick", parse_schedule({"every_s": 1}, now=now))
    once = create("once", OneOffSchedule(one_off_at))
    for name in ("worker", "reaper", "scheduler"):
        fleet.start(service(name, prefix))

    def cron_succeeded() -> int:
        assert not fleet.dead(), output(fleet)
        n = rows(
            engine, "SELECT count(*) FROM runs WHERE job_id = :j AND status = 'succeeded'", j=tick
        )[0][0]
        return n >= 6 and n

    wait_until("six cron runs to succeed", cron_succeeded)
    wait_until(
        "the one-off run to succeed",
        lambda: rows(
            engine, "SELECT 1 FROM runs WHERE job_id = :j AND status = 'succeeded'", j=once
        ),
    )
    fleet.stop(timeout_s=30)
    got = rows(
        engine,
        "SELECT run_id::text AS run_id, job_id, scheduled_at, status, attempt, started_at, "
        "finished_at "
        "FROM runs ORDER BY scheduled_at",
    )
    cron = [r for r in got if str(r.job_id) == tick]
    one = [r for r in got if str(r.job_id) == once]
    assert [r.scheduled_at for r in one] == [one_off_at]
    # one run per second, none missing, from the first to the last (none twice is the
    # primary key's doing: the run id is the job and the second)
    seconds = [r.scheduled_at for r in cron]
    assert all((b - a) == timedelta(seconds=1) for a, b in itertools.pairwise(seconds))
    finished = [r for r in cron + one if r.status == "succeeded"]
    assert len(finished) >= 7
    # none twice in effect: the execution journal has one start per run, each attempt 1,
    # and one for every run that succeeded
    starts = Counter(
        (run_id, attempt)
        for path in journals.glob("*.journal")
        for run_id, attempt, _ms, _worker in read_journal(path)
    )
    assert starts and max(starts.values()) == 1, starts
    assert {a for _r, a in starts} == {1}
    assert {r for r, _a in starts} >= {str(r.run_id) for r in finished}
    for r in finished:
        assert r.attempt == 1
        assert r.scheduled_at <= r.started_at <= r.finished_at  # never before its second
        assert (r.started_at - r.scheduled_at).total_seconds() < LAG_BOUND_S
    # runs still in flight when the fleet stopped were drained or given back, not lost:
    # a run claimed ahead of its second is released (its lease ends now; the reaper
    # re-queues it), a run not claimed yet stays pending
    assert {r.status for r in cron} <= {"succeeded", "pending", "running"}
    held = rows(engine, "SELECT 1 FROM runs WHERE status = 'running' AND lease_expires_at > now()")
    assert held == []


def test_critical_runs_start_before_a_low_backlog(
    engine: Engine, fleet: Fleet, prefix: str, settings: Settings
) -> None:
    """A low-tier backlog, then critical runs a second later, all published and overdue
    while no worker runs; one worker with concurrency 1 then starts every critical run
    first (a backlog goes by priority, then age)."""
    now = db_now(engine)
    low_at = (now + timedelta(seconds=3)).replace(microsecond=0)
    bulk_one_offs(engine, low_at, 20, "low", {"type": "noop"})
    bulk_one_offs(engine, low_at + timedelta(seconds=1), 5, "critical", {"type": "noop"})
    fleet.start(service("scheduler", prefix))
    wait_until(
        "all 25 runs published and overdue",
        lambda: (
            len(messages(settings, prefix)) == 25 and db_now(engine) > low_at + timedelta(seconds=2)
        ),
        detail=lambda: statuses(engine) + "\n" + output(fleet),
    )
    fleet.start(service("worker", prefix, "--concurrency", "1"))
    wait_until(
        "all 25 runs to succeed",
        lambda: rows(engine, "SELECT count(*) FROM runs WHERE status = 'succeeded'")[0][0] == 25,
        detail=lambda: statuses(engine) + "\n" + output(fleet),
    )
    got = rows(engine, "SELECT priority, started_at FROM runs")
    critical = [r for r in got if r.priority == "critical"]
    low = [r for r in got if r.priority == "low"]
    assert len(critical) == 5 and len(low) == 20
    # due a second after every low run, started before any of them
    assert max(r.started_at for r in critical) < min(r.started_at for r in low)
