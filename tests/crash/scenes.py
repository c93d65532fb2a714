"""What each crash point needs to be reached, and the checks of the writes the drills'
ledger does not see (the run history's days, the pull queue).

Every step is one or more services armed with a point; `before` sets the scene and
`provoke` makes the point come (see tests/crash/harness.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import httpx
from sqlalchemy import Engine, text

from chaos.fleet import wait_for
from kit.core.ids import run_id_floor
from kit.core.retention import day_bounds_ms
from kit.store.run_history import create_day_in, partition_name, run_partitions
from tests.crash.harness import CrashFleet, Step, step
from tests.integration.worker_rows import make_job, make_run

# -- scheduler --------------------------------------------------------------------------


def _restart_b_once_a_holds(f: CrashFleet) -> None:
    """sched-a releases what moves away only when its share shrinks: once it holds some
    partitions, sched-b leaves (a takes them all) and joins again (a gives half back)."""
    if f.partitions_held("sched-a") > 0:
        f.fleet.stop("sched-b")
        f.start("sched-b")


def a_alone(f: CrashFleet) -> None:
    f.stop("sched-b")  # sched-a holds every partition: every due trigger is its to scan


SCHEDULER_STEPS = (
    step(("sched-a", "partition_lease.member")),
    step(("sched-a", "partition_lease.acquired")),
    step(("sched-a", "partition_lease.released"), provoke=_restart_b_once_a_holds, every_s=4),
    step(("sched-a", "scan.on_time_triggers_advanced"), before=a_alone),
    step(("sched-a", "scan.on_time_runs_written")),
    step(("sched-a", "scan.runs_written")),
    step(("sched-a", "scan.rearmed")),
    step(("sched-a", "scan.triggers_advanced")),
    # the committed runs never go out: the reaper finds them lost and publishes them
    step(("sched-a", "scan.committed"), ("reaper", "republish.published")),
)

# -- worker and reaper --------------------------------------------------------------------


def _one_worker(f: CrashFleet) -> None:
    """Both nodes back; w1 alone in the group, so every job's runs are its."""
    f.start("sched-b")
    f.stop("w2")


def _holding(f: CrashFleet, worker: str, sql: str) -> bool:
    """Whether `worker`'s running process claimed a run that is still its and matches
    `sql` (the witness's claims: an earlier process of the same name left leases too)."""
    if not f.fleet.alive(worker):
        return False
    since = f.fleet.running[worker].started_at
    with f.engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM runs r JOIN jobs j ON j.job_id = r.job_id "
                    "JOIN chaos_writes w ON w.run_id = r.run_id AND w.kind = 'claim' "
                    "  AND w.writer = 'worker:' || :w AND w.at > to_timestamp(:since) "
                    f"WHERE r.status = 'running' AND r.worker_id = :w AND {sql})"
                ),
                {"w": worker, "since": since},
            ).scalar_one()
        )


def _kill_w1_holding_a_last_attempt(f: CrashFleet) -> None:
    """The reaper's dead path needs a lease that expires on its last attempt: w1 dies
    (SIGKILL from outside) while it holds a run of a one-attempt job."""
    if _holding(f, "w1", "j.name LIKE 'key-single-%'"):
        f.kill("w1")


def _stop_w1_holding_unstarted(f: CrashFleet) -> None:
    """A stop gives back runs claimed ahead of their second: SIGTERM w1 while it holds
    some; if it had none by then (it exits cleanly), it starts again, armed."""
    if not _holding(f, "w1", "r.scheduled_at > now() + interval '300 milliseconds'"):
        return
    proc = f.fleet.running["w1"].proc
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    with contextlib.suppress(Exception):
        proc.wait(timeout=15)
    if proc.returncode in (0, -signal.SIGTERM):  # nothing to give back by then
        f.start("w1", "give_back.returned")


FAIR_TENANT = "crash-fair"  # not the drills' tenant: the ledger's audit never sees these


def _a_burst_behind_which_w1_reads(f: CrashFleet) -> None:
    """A tenant's burst of 150 short runs, due now, on w1 alone: far over its share of w1's
    start budget (8 slots and a 4 s lease start 16 runs in half a lease), so w1 sends the
    excess back and, meeting those runs again with more behind them, reads past them.
    Called again every 10 s until w1 reads past (a slow machine), so each burst is a job
    of its own name."""
    from kit.core.timeutil import to_epoch_ms
    from kit.transport import RunMessage, RunPublisher

    name = f"burst-{uuid.uuid4().hex[:8]}"
    job = make_job(f.engine, {"type": "sleep", "seconds": 0.2}, tenant=FAIR_TENANT, name=name)
    at = datetime.now(UTC).replace(microsecond=0)
    messages = []
    for i in range(150):
        when = at + timedelta(milliseconds=i)
        rid = make_run(f.engine, job, when, FAIR_TENANT)
        messages.append(RunMessage(rid, job, 1, to_epoch_ms(when), "normal"))
    publisher = RunPublisher(f.kafka_bootstrap, topic_prefix=f.prefix)
    try:
        publisher.publish(messages)
    finally:
        publisher.close()


WORKER_STEPS = (
    step(("w1", "claim.committed"), ("reaper", "republish.orphans_released"), before=_one_worker),
    # w1's claimed runs are never held: their leases run out, the reaper re-queues them
    step(("w1", "claim.offsets_committed"), ("reaper", "reap.requeued")),
    # w1 dies with the runs it read past published again, their offsets not committed:
    # both messages of each come back, and the second claims nothing
    step(
        ("w1", "claim.read_past_published"),
        before=_a_burst_behind_which_w1_reads,
        provoke=_a_burst_behind_which_w1_reads,
        every_s=10,
    ),
    step(("w1", "start.begun"), ("reaper", "reap.published")),
    step(("w1", "start.effect_done")),
    step(("reaper", "reap.dead_written"), provoke=_kill_w1_holding_a_last_attempt, every_s=0.5),
    step(("w1", "finish.runs_written")),
    step(("w1", "finish.queued_released")),
    step(("w1", "finish.queued_published")),
    step(("w1", "finish_failed.retry_written")),
    step(("w1", "finish_failed.dead_written")),
    step(("w1", "finish_failed.dead_lettered")),
    step(("w1", "give_back.returned"), provoke=_stop_w1_holding_unstarted, every_s=0.5),
)

# -- maintenance: the run history's days ----------------------------------------------------

OLD_DAYS = 60  # past the default retention (30 days): its day is dropped
MAINT_TENANT = "crash-maint"  # not the drills' tenant: the ledger's audit never sees these


@dataclass
class History:
    """An old day the maintenance must drop keeping what the kit still needs, and a day
    ahead it must create."""

    engine: Engine
    old_day: date = field(init=False)
    ahead_day: date = field(init=False)
    kept: dict[str, str] = field(default_factory=dict)  # run id -> status
    gone: list[str] = field(default_factory=list)

    def plant_old_day(self) -> None:
        today = datetime.now(UTC).date()
        self.old_day = today - timedelta(days=OLD_DAYS)
        self.ahead_day = today + timedelta(days=3)
        with self.engine.begin() as conn:
            create_day_in(conn, self.old_day)
        job = make_job(self.engine, tenant=MAINT_TENANT, name="old-history")
        at = datetime(self.old_day.year, self.old_day.month, self.old_day.day, 12, tzinfo=UTC)
        waiting = make_run(self.engine, job, at, MAINT_TENANT, "retry_scheduled")
        dead = make_run(self.engine, job, at + timedelta(hours=1), MAINT_TENANT, "dead")
        done = make_run(self.engine, job, at + timedelta(hours=2), MAINT_TENANT, "succeeded")
        with self.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO dead_letters (run_id, job_id, tenant) VALUES (:r, :j, :t)"),
                {"r": dead, "j": job, "t": MAINT_TENANT},
            )
        self.kept = {waiting: "retry_scheduled", dead: "dead"}
        self.gone = [done]

    def drop_day_ahead(self) -> None:
        """A day ahead not made yet (as after a long outage of the maintenance)."""
        name = partition_name(self.ahead_day)
        with self.engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {name}"))

    def days(self) -> set[date]:
        with self.engine.connect() as conn:
            return {p.day for p in run_partitions(conn) if p.day is not None}

    def check(self) -> list[str]:
        """What is wrong with the run history after the maintenance's crashes (nothing)."""
        problems = []
        days = self.days()
        if self.old_day in days:
            problems.append(f"the old day {self.old_day} was never dropped")
        if self.ahead_day not in days:
            problems.append(f"the day ahead {self.ahead_day} was never created")
        with self.engine.connect() as conn:
            rows = dict(
                conn.execute(
                    text("SELECT run_id::text, status FROM runs WHERE tenant = :t"),
                    {"t": MAINT_TENANT},
                ).all()
            )
        for run_id, status in self.kept.items():
            if rows.get(run_id) != status:
                problems.append(f"kept run {run_id} ({status}) is {rows.get(run_id)}")
        problems += [f"run {r} of the dropped day is still there" for r in self.gone if r in rows]
        lo, hi = (run_id_floor(ms) for ms in day_bounds_ms(self.ahead_day))
        with self.engine.connect() as conn:
            stray = conn.execute(
                text(
                    "SELECT count(*) FROM runs_default "
                    "WHERE run_id >= CAST(:lo AS uuid) AND run_id < CAST(:hi AS uuid)"
                ),
                {"lo": lo, "hi": hi},
            ).scalar_one()
        if stray:
            problems.append(f"{stray} runs of {self.ahead_day} left in the default partition")
        return problems


def maintenance_steps(history: History) -> tuple[Step, ...]:
    return (
        step(
            ("maintenance", "run_history.day_detached"),
            before=lambda f: history.plant_old_day(),
        ),
        step(
            ("maintenance", "run_history.day_created"),
            before=lambda f: history.drop_day_ahead(),
        ),
    )


# -- api: the pull queue ------------------------------------------------------------------

QUEUE = "crash"


@dataclass
class QueueClient:
    """A pull worker of the queue API that repeats what a crash cut off, as a client
    must: a lease whose answer never came is asked again (the task comes back, or a
    later lease takes it once the first one's lease, if it was written, ran out), an
    ack, nack or heartbeat with the token it holds."""

    fleet: CrashFleet
    tasks: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)  # task id -> lease token
    acked: dict[str, str] = field(default_factory=dict)  # task id -> the token that acked
    stale: dict[str, str] = field(default_factory=dict)  # task id -> a token it no longer holds
    nacked: str = ""  # the task whose nack a crash cut off
    beaten: str = ""  # the task whose heartbeat a crash cut off

    @property
    def api(self) -> httpx.Client:
        return self.fleet.api

    def _api_up(self) -> None:
        def up() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return self.api.get("/healthz").status_code == 200
            return False

        wait_for("the api", up, 60)

    def enqueue(self, n: int) -> None:
        self._api_up()
        body = {"tasks": [{"payload": {"n": i}, "max_attempts": 5} for i in range(n)]}
        answer = self.api.post(f"/v1/queues/{QUEUE}/tasks:batch", json=body)
        assert answer.status_code == 201, answer.text
        self.tasks += [t["task_id"] for t in answer.json()["tasks"]]

    def lease(self, n: int = 1, lease_sec: int = 60) -> list[str]:
        answer = self.api.post(
            f"/v1/queues/{QUEUE}/lease",
            json={"worker_id": "crash-client", "max_tasks": n, "lease_sec": lease_sec},
        )
        assert answer.status_code == 200, answer.text
        got = [(t["task_id"], t["lease_token"]) for t in answer.json()["tasks"]]
        self.held.update(got)
        return [t for t, _ in got]

    def try_(self, call: str, task_id: str, body: dict) -> httpx.Response | None:
        """A call the armed API may die in (None: it did)."""
        try:
            return self.api.post(f"/v1/tasks/{task_id}/{call}", json=body)
        except httpx.TransportError:
            return None

    def ack(self, task_id: str) -> None:
        token = self.held[task_id]
        answer = self.api.post(f"/v1/tasks/{task_id}/ack", json={"lease_token": token})
        assert answer.status_code == 200, answer.text
        self.acked[task_id] = token
        del self.held[task_id]

    # the steps' scenes

    def lease_cut_off(self, f: CrashFleet) -> None:
        with contextlib.suppress(httpx.TransportError):
            self.lease(2, lease_sec=3)

    def before_ack(self, f: CrashFleet) -> None:
        self._api_up()
        got = self.lease(2)
        assert len(got) == 2, f"the lease cut off by the crash took tasks for good: {got}"

    def ack_cut_off(self, f: CrashFleet) -> None:
        for task_id, token in list(self.held.items()):
            self.try_("ack", task_id, {"lease_token": token})

    def before_nack(self, f: CrashFleet) -> None:
        self._api_up()
        for task_id in list(self.held):
            self.ack(task_id)  # the acks cut off: the same token, accepted now
        (self.nacked,) = self.lease(1)

    def nack_cut_off(self, f: CrashFleet) -> None:
        token = self.held[self.nacked]
        self.try_("nack", self.nacked, {"lease_token": token, "error": "cut off"})

    def before_heartbeat(self, f: CrashFleet) -> None:
        self._api_up()
        token = self.held.pop(self.nacked)
        answer = self.api.post(
            f"/v1/tasks/{self.nacked}/nack",
            json={"lease_token": token, "error": "again", "retryable": True},
        )
        assert answer.status_code == 200, answer.text  # the first nack was never written
        self.stale[self.nacked] = token
        (self.beaten,) = self.lease(1)

    def heartbeat_cut_off(self, f: CrashFleet) -> None:
        token = self.held[self.beaten]
        self.try_("heartbeat", self.beaten, {"lease_token": token, "extend_sec": 30})

    def finish(self) -> list[str]:
        """After the last crash: every task leased and acked; what is wrong (nothing)."""
        self._api_up()
        problems = []
        token = self.held[self.beaten]
        answer = self.api.post(
            f"/v1/tasks/{self.beaten}/heartbeat", json={"lease_token": token, "extend_sec": 30}
        )
        if answer.status_code != 200:
            problems.append(f"a heartbeat after the cut-off one: {answer.status_code}")
        self.ack(self.beaten)
        for _ in range(20):  # bounded: the nacked task comes back after its backoff
            if not (set(self.tasks) - set(self.acked)):
                break
            for task_id in self.lease(5, lease_sec=30):
                self.ack(task_id)
            time.sleep(0.5)
        missing = set(self.tasks) - set(self.acked)
        if missing:
            problems.append(f"tasks never leased again after the crashes: {sorted(missing)}")
        for task_id, token in self.stale.items():
            answer = self.api.post(f"/v1/tasks/{task_id}/ack", json={"lease_token": token})
            if answer.status_code != 409:
                problems.append(f"an ack with a token no longer held: {answer.status_code}")
        stats = self.api.get(f"/v1/queues/{QUEUE}/stats").json()
        if (stats["queued"], stats["leased"], stats["dlq"]) != (0, 0, 0):
            problems.append(f"the queue is not empty: {stats}")
        with self.fleet.engine.connect() as conn:
            attempts = dict(
                conn.execute(
                    text("SELECT task_id::text, attempt FROM queue_tasks WHERE queue = :q"),
                    {"q": QUEUE},
                ).all()
            )
        # a task's attempts: one lease each, and one more for the task nacked (the cut-off
        # lease and nack were never written; a lease that was, ran out, and counts)
        wrong = {t: a for t, a in attempts.items() if a != (2 if t == self.nacked else 1)}
        if wrong:
            problems.append(f"attempts not those of the calls written: {wrong}")
        return problems


def api_steps(client: QueueClient) -> tuple[Step, ...]:
    return (
        step(
            ("api", "queue.lease_decided"),
            before=lambda f: client.enqueue(6),
            provoke=client.lease_cut_off,
            every_s=0.5,
        ),
        step(
            ("api", "queue.ack_decided"),
            before=client.before_ack,
            provoke=client.ack_cut_off,
            every_s=0.5,
        ),
        step(
            ("api", "queue.nack_decided"),
            before=client.before_nack,
            provoke=client.nack_cut_off,
            every_s=0.5,
        ),
        step(
            ("api", "queue.heartbeat_decided"),
            before=client.before_heartbeat,
            provoke=client.heartbeat_cut_off,
            every_s=0.5,
        ),
    )
