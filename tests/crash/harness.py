"""The crash suite's fleet: the kit's services as real processes (`cronfleet scheduler`,
`worker`, `reaper`, `maintenance`, `api`) on the integration stack's PostgreSQL and
Kafka, with a database and topics of their own, the drills' witness and effect ledger.

A step arms one or more services with a crash point (kit.core.crash_points): each is
started with CRONFLEET_CRASH_AT, the step provokes what the point needs (another
service stopped, a worker killed while it holds a run, a queue call), and waits for the
armed ones to die there: exit by SIGKILL, and their log naming the point. A point not
reached in time fails the step: the suite proves every point is reached. A service that
died is started again, unarmed, unless the next step arms it.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import Engine, text

from chaos import instrument, ledger
from chaos.audit import Audit, Finding, audit
from chaos.drill import Timings, partitions_held
from chaos.fleet import DrillFleet, ServiceSpec, wait_for
from chaos.history import history_read
from chaos.records import FaultWindow, History, Params
from chaos.workload import JobClass, Shape, Workload
from kit.core.crash_points import SETTING
from kit.store.tokens import token_create
from kit.tasks.policy import local_policy_toml, local_run_as
from kit.tasks.tenant_policy import local_tenants_toml

ROOT = Path(__file__).resolve().parents[2]
TENANT = "chaos"  # the drills' tenant: chaos.history reads its runs
QUIET_TIMEOUT_S = 120.0
POINT_TIMEOUT_S = 45.0  # the longest a step waits for its armed services to die
BUSY = "('pending', 'running', 'retry_scheduled')"

# Short leases and periods, so a crash and its recovery fit in seconds (the drills').
TIMINGS = Timings(partitions=32, topic_partitions=2)

# What the fleet runs through every step: mostly key-honouring jobs, some that work a
# while before their effect, some that ignore the key, a cron minute, one-attempt jobs
# (a lease that expires is their last attempt: the reaper's dead path; the suite kills
# their workers often, so they opt out of the auto-pause after dead letters), jobs that queue
# behind their own running run (overlap 'queue': a finish releases the next), and
# poison jobs that fail every attempt (retries, re-arms, dead letters).
SHAPE = Shape(
    (
        JobClass("fast", 5, every_s=2),
        JobClass("slow", 2, every_s=3, pre_s=0.8),
        JobClass("naive", 2, mode="naive", every_s=2),
        JobClass("minute", 2, every_s=None, cron="* * * * *"),
        JobClass("single", 3, every_s=3, pre_s=1.0, max_attempts=1, auto_pause=False),
        JobClass("queued", 2, every_s=3, pre_s=3.3, overlap="queue"),
        JobClass("fail", 3, mode="fail", every_s=2),
    )
)


@dataclass(frozen=True)
class Arm:
    service: str  # the instance: sched-a, sched-b, w1, w2, reaper, maintenance, api
    point: str


@dataclass
class Step:
    arms: tuple[Arm, ...]
    before: Callable[[CrashFleet], None] | None = None  # the scene, once the armed started
    provoke: Callable[[CrashFleet], None] | None = None  # called until the points are hit
    every_s: float = 2.0  # how often `provoke` is called while waiting


@dataclass
class Reached:
    point: str
    service: str
    at_ms: int
    waited_s: float


def step(*arms: tuple[str, str], **kw: object) -> Step:
    return Step(tuple(Arm(s, p) for s, p in arms), **kw)  # type: ignore[arg-type]


@dataclass
class CrashFleet:
    database_url: str
    engine: Engine
    kafka_bootstrap: str
    out: Path
    tag: str
    fleet: DrillFleet = field(init=False)
    workload: Workload = field(init=False)
    api: httpx.Client = field(init=False)
    token: str = field(init=False)
    faults: list[FaultWindow] = field(default_factory=list)
    reached: list[Reached] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    armed: dict[str, str] = field(default_factory=dict)  # instance -> point it was started with
    stopped: set[str] = field(default_factory=set)  # instances a step keeps down
    code: dict[str, Path] = field(default_factory=dict)  # instance -> a planted copy to run

    @property
    def prefix(self) -> str:
        return f"cf.crash.{self.tag}"

    @property
    def group(self) -> str:
        return f"cf-crash-{self.tag}"

    @property
    def ledger_dir(self) -> Path:
        return self.out / "ledger"

    def setup(self) -> None:
        ledger.prepare(self.ledger_dir, local_run_as())
        instrument.install(self.engine)
        self.token = token_create(self.engine, TENANT, ("read", "write", "command")).token
        policy = self.out / "tasks.toml"
        policy.write_text(local_policy_toml(TENANT, ["/bin/sh"]))
        tenants = self.out / "tenants.toml"
        tenants.write_text(local_tenants_toml([TENANT]))  # the workload uses every tier
        port = _free_port()
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("CRONFLEET_DATABASE_URL", "CRONFLEET_KAFKA_BOOTSTRAP", SETTING)
        }
        env |= TIMINGS.env()
        env |= {
            # this tree's kit, whatever the interpreter's editable install points at
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
            "CRONFLEET_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "CRONFLEET_TASK_POLICY_FILE": str(policy),
            "CRONFLEET_TENANT_POLICY_FILE": str(tenants),
            "CRONFLEET_EXECUTION_JOURNAL_DIR": str(self.out / "journal"),
            "CRONFLEET_API_PORT": str(port),
            "CRONFLEET_MAINTENANCE_PERIOD_MS": "1000",
        }
        self.fleet = DrillFleet(env, self.database_url, self.out / "logs")
        self.api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        common = ["--topic-prefix", self.prefix]
        group = ["--group-id", self.group]
        specs = [ServiceSpec("api", "api", ["api", *common])]
        for node in ("sched-a", "sched-b"):
            specs.append(ServiceSpec(node, "scheduler", ["scheduler", "--node-id", node, *common]))
        specs.append(ServiceSpec("reaper", "reaper", ["reaper", *common, *group]))
        for worker in ("w1", "w2"):
            args = ["worker", "--worker-id", worker, "--concurrency", "8", *common, *group]
            specs.append(ServiceSpec(worker, "worker", [*args, "--drain-s", "0.5"]))
        specs.append(ServiceSpec("maintenance", "maintenance", ["maintenance"]))
        for spec in specs:
            self.fleet.specs[spec.name] = spec
            self.start(spec.name)
        t0 = time.monotonic()
        wait_for("the api", self._api_up, 90)
        wait_for("both workers' presence", lambda: self._workers_present() >= 2, 90)
        self.wait_partitions_covered()
        self.workload = Workload(self.api, self.ledger_dir, random.Random(32))
        self.workload.create_recurring(SHAPE)
        self.notes.append(f"fleet up and workload made in {time.monotonic() - t0:.1f} s")

    # -- the fleet ----------------------------------------------------------------------

    def _api_up(self) -> bool:
        self._fail_if_dead()
        with contextlib.suppress(httpx.TransportError):
            return self.api.get("/healthz").status_code == 200
        return False

    def _workers_present(self) -> int:
        self._fail_if_dead()
        with self.engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM workers")).scalar_one())

    def _fail_if_dead(self) -> None:
        for name in self.fleet.dead_unexpectedly():
            if name not in self.stopped and name not in self.armed:
                raise RuntimeError(f"{name} exited on its own:\n{self.fleet.log_tail(name)}")

    def partitions_held(self, node: str | None = None) -> int:
        return partitions_held(self.engine, node)

    def wait_partitions_covered(self, timeout_s: float = 60.0) -> None:
        wait_for(
            "every partition to have a live owner",
            lambda: self.partitions_held() >= TIMINGS.partitions,
            timeout_s,
            0.25,
        )

    def start(self, name: str, point: str | None = None) -> None:
        """Start `name` (armed with `point`); a running one is stopped first."""
        if self.fleet.alive(name):
            self.fleet.stop(name)
        spec = self.fleet.specs[name]
        spec.env = {SETTING: point} if point else {}
        if name in self.code:  # a planted copy of the kit: run there, import from there
            spec.cwd = self.code[name]
            spec.env["PYTHONPATH"] = str(self.code[name])
        self.fleet.start(spec)
        if point:
            self.armed[name] = point
        else:
            self.armed.pop(name, None)
        self.stopped.discard(name)

    def stop(self, name: str) -> None:
        """A graceful stop (SIGTERM) that the step keeps down."""
        self.stopped.add(name)
        self.fleet.stop(name)

    def kill(self, name: str) -> None:
        """SIGKILL from outside (a host dying: its tasks too), then start it again."""
        self.fleet.kill(name, with_tasks=True)
        self.start(name)

    # -- the steps ----------------------------------------------------------------------

    def run_steps(self, steps: Sequence[Step]) -> None:
        for i, s in enumerate(steps):
            self._run_step(i, s)
            upcoming = {a.service for a in steps[i + 1].arms} if i + 1 < len(steps) else set()
            for name in list(self.armed):
                if not self.fleet.alive(name) and name not in upcoming:
                    self.start(name)  # unarmed: the next step does not want it armed
        for name in sorted(self.stopped | set(self.armed)):
            self.start(name)

    def _run_step(self, index: int, s: Step) -> None:
        begin_ms = now_ms()
        for arm in s.arms:
            self.start(arm.service, arm.point)
        if s.before is not None:
            s.before(self)
        waiting = {a.service: a.point for a in s.arms}
        started = time.monotonic()
        next_provoke = started + s.every_s
        while waiting:
            for name, point in list(waiting.items()):
                if self.fleet.alive(name):
                    continue
                self._check_died_at(name, point)
                self.reached.append(
                    Reached(point, name, now_ms(), round(time.monotonic() - started, 1))
                )
                del waiting[name]
            if not waiting:
                break
            if time.monotonic() - started > POINT_TIMEOUT_S:
                tails = "\n".join(f"{n}:\n{self.fleet.log_tail(n, 8)}" for n in waiting)
                raise AssertionError(
                    f"step {index}: crash points never reached in {POINT_TIMEOUT_S:.0f} s: "
                    f"{waiting}\n{tails}"
                )
            if s.provoke is not None and time.monotonic() >= next_provoke:
                s.provoke(self)
                next_provoke = time.monotonic() + s.every_s
            time.sleep(0.1)
        for arm in s.arms:
            self.faults.append(
                FaultWindow(f"crash:{arm.point}", arm.service, index, begin_ms, now_ms())
            )

    def _check_died_at(self, name: str, point: str) -> None:
        code = self.fleet.running[name].proc.returncode
        log = self.fleet.log_tail(name, 40)
        if code != -signal.SIGKILL or f"crash point {point} reached" not in log:
            raise AssertionError(
                f"{name} armed at {point} exited with {code}, not at the point:\n{log}"
            )

    # -- the end --------------------------------------------------------------------------

    def settle_and_read(self, quiet_timeout_s: float = QUIET_TIMEOUT_S) -> History:
        """Every service up, partitions owned, a few healthy fires; then the workload is
        paused, the fleet goes quiet and the history is read."""
        t0 = time.monotonic()
        self.wait_partitions_covered(90)
        time.sleep(TIMINGS.scan_ahead_ms / 1000 + 2)
        self.workload.pause_all()
        self.notes.append(f"settled in {time.monotonic() - t0:.1f} s")
        try:
            wait_for("the fleet to go quiet", lambda: self._busy() == 0, quiet_timeout_s, 0.5)
        except TimeoutError as exc:
            self.notes.append(f"{exc}: {self._busy()} runs still busy")
        self.notes.append(f"quiet after {time.monotonic() - t0:.1f} s")
        time.sleep(1.0)  # the journals flush every 0.2 s
        grace = TIMINGS.misfire_grace_ms
        return history_read(
            self.engine,
            self.workload.jobs,
            self.ledger_dir,
            self.out / "journal",
            self.faults,
            [],
            Params(grace, TIMINGS.scan_ahead_ms),
            self.notes,
        )

    def _busy(self) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    text(f"SELECT count(*) FROM runs WHERE tenant = :t AND status IN {BUSY}"),
                    {"t": TENANT},
                ).scalar_one()
            )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.fleet.stop_all()
        ledger.kill_leftover_tasks(self.ledger_dir)
        self.api.close()


@dataclass
class Verdict:
    audit: Audit
    lost: list[Finding]  # what the auditor counts lost, less the justified
    expired_last_attempts: int  # one-attempt runs dead-lettered when their worker died

    @property
    def passed(self) -> bool:
        a = self.audit
        return not (
            self.lost
            or a.duplicate_effects
            or a.stale_writes
            or a.unexpected_effects
            or a.unexpected_runs
        )


def judge(history: History) -> Verdict:
    """The drills' auditor on the history. One legitimate loss it does not know: a run of
    a job allowed one attempt whose worker died before the effect is dead-lettered (the
    reaper: its lease expired on its last attempt). Visible and replayable, so not lost;
    any other dead letter of a key-honouring job still is."""
    result = audit(history)
    jobs = {j.name: j for j in history.jobs}
    runs = {r.run_id: r for r in history.runs}
    lost, justified = [], 0
    for finding in result.lost:
        job, run = jobs.get(finding.job), runs.get(finding.run_id)
        if (
            job is not None
            and run is not None
            and job.max_attempts == 1
            and run.status == "dead"
            and (run.error or "").startswith("lease expired")
        ):
            justified += 1
        else:
            lost.append(finding)
    return Verdict(result, lost, justified)


def explain(verdict: Verdict, fleet: CrashFleet) -> str:
    """What a reader of a failure needs: the findings, and which step each fell in."""
    lines = [
        f"summary: {verdict.audit.summary()}",
        f"one-attempt runs dead-lettered when their worker died: {verdict.expired_last_attempts}",
    ]
    findings = [
        *(("lost", f) for f in verdict.lost),
        *(("duplicate effect", f) for f in verdict.audit.duplicate_effects),
        *(("unexpected effect", f) for f in verdict.audit.unexpected_effects),
        *(("unexpected run", f) for f in verdict.audit.unexpected_runs),
    ]
    for kind, f in findings[:30]:
        during = [w.kind for w in fleet.faults if w.start_ms - 5000 <= f.at_ms <= w.heal_ms]
        lines.append(f"{kind}: {f.job} at {f.at_ms} ({f.why}); near {during}")
    lines += [f"stale write: {w}" for w in verdict.audit.stale_writes[:10]]
    lines += [f"note: {n}" for n in fleet.notes]
    return "\n".join(lines)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
