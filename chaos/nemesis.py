"""The faults, each a real act on a real process, recorded as a window (start, heal) in
the drill's fault log. Drills call them alone (drills 1-7) or several at once (drill 8).

Every fault heals itself before it returns: a killed service is restarted, a cut link is
healed, a skewed clock is set back, a crashed database or broker is started again.
"""

from __future__ import annotations

import time
from datetime import datetime

from sqlalchemy import create_engine, text

from chaos import gray
from chaos.drill import DrillContext
from chaos.fleet import wait_for
from chaos.ledger import LedgerLine
from chaos.netns import Namespace
from chaos.skew import ClockSkew

WATCH_S = 8.0  # how long a fault waits for its moment (a task in the right phase)


def _live_worker_line(ctx: DrillContext, line: LedgerLine) -> str | None:
    return ctx.worker_of_pid(line.ppid)


def worker_kill_after_effect(ctx: DrillContext, cycle: int, down_s: float) -> bool:
    """SIGKILL a worker (and the tasks it runs: its host dies) while one of its tasks has
    made its effect and not returned yet. False when no such moment came."""
    tail = ctx.tail("window.log")
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        for line in tail.new():
            victim = _live_worker_line(ctx, line)
            if victim is not None and victim not in ctx.down:
                with ctx.fault("worker_kill_after_effect", victim, cycle):
                    ctx.kill(victim)
                    time.sleep(down_s)
                    ctx.restart(victim)
                return True
        time.sleep(0.02)
    ctx.notes.append(f"cycle {cycle}: no task in its after-effect window within {WATCH_S} s")
    return False


def worker_kill_mid_task(ctx: DrillContext, cycle: int, down_s: float) -> bool:
    """SIGKILL a worker while one of its tasks is working towards its effect (started
    150-400 ms ago, no effect yet: not a fast task): the run must be executed again, by
    someone, later."""
    found = gray.task_mid_work(ctx, min_age_s=0.15, max_age_s=0.4, watch_s=WATCH_S)
    if found is None:
        ctx.notes.append(f"cycle {cycle}: no task mid-work within {WATCH_S} s")
        return False
    victim, _ = found
    with ctx.fault("worker_kill_mid_task", victim, cycle):
        ctx.kill(victim)
        time.sleep(down_s)
        ctx.restart(victim)
    return True


def scheduler_kill(ctx: DrillContext, cycle: int, victim: str, down_s: float) -> None:
    with ctx.fault("scheduler_kill", victim, cycle):
        ctx.kill(victim, with_tasks=False)
        time.sleep(down_s)
        ctx.restart(victim)


def _in_scan(ctx: DrillContext, node: str) -> bool:
    """Is `node` inside its scan transaction now (its backend holds its lease rows)?"""
    with ctx.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT query FROM pg_stat_activity WHERE application_name = :app "
                "AND xact_start IS NOT NULL"
            ),
            {"app": f"scheduler:{node}"},
        ).scalars()
        return any("triggers" in q or "INSERT INTO runs" in q or "FOR SHARE" in q for q in rows)


def scheduler_cut(ctx: DrillContext, cycle: int, node: str, hold_s: float, mid_scan: bool) -> None:
    """Cut `node` (running in the drill's namespace) off from PostgreSQL for `hold_s`:
    at a moment it is inside a scan transaction when `mid_scan` (it holds its lease rows
    and has written nothing yet), else now. Its Kafka link stays up."""
    ns: Namespace = ctx.state["namespace"]
    port = ctx.state["postgres_port"]
    if mid_scan:
        try:
            wait_for(f"{node} inside a scan", lambda: _in_scan(ctx, node), WATCH_S, 0.005)
        except TimeoutError:
            ctx.notes.append(f"cycle {cycle}: {node} not seen mid-scan; cut anyway")
    with ctx.fault("scheduler_cut", node, cycle):
        ns.cut(port)
        try:
            time.sleep(hold_s)
        finally:
            ns.heal()


def postgres_crash(ctx: DrillContext, cycle: int, down_s: float) -> None:
    with ctx.fault("postgres_crash", "postgres", cycle):
        ctx.stack.postgres_crash()
        time.sleep(down_s)
        ctx.stack.postgres_start()
    _wait_database(ctx)


def _wait_database(ctx: DrillContext) -> None:
    def answers() -> bool:
        engine = create_engine(ctx.stack.database_url)
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except Exception:
            return False
        finally:
            engine.dispose()

    wait_for("postgres to answer", answers, 60, 0.25)


def kafka_kill(ctx: DrillContext, cycle: int, down_s: float) -> None:
    with ctx.fault("kafka_kill", "broker", cycle):
        ctx.stack.kafka_kill()
        time.sleep(down_s)
        ctx.stack.kafka_start()


def clock_skew(ctx: DrillContext, cycle: int, offsets: dict[str, float], hold_s: float) -> None:
    """Step the wall clocks of the named services by their offsets, hold, step back."""
    skews: dict[str, ClockSkew] = ctx.state["skews"]
    label = ", ".join(f"{name} {off:+.1f}s" for name, off in offsets.items())
    with ctx.fault("clock_skew", label, cycle):
        for name, offset in offsets.items():
            skews[name].set(offset)
        try:
            time.sleep(hold_s)
        finally:
            for name in offsets:
                skews[name].set(0.0)
    time.sleep(1.2)  # libfaketime re-reads the offset within a second


def poison_jobs(ctx: DrillContext, at: datetime, size: int) -> None:
    """Create `size` one-off poison runs (fail, hang past the timeout, crash) due at `at`."""
    modes = ("fail", "hang", "crash")
    for i, mode in enumerate(modes):
        share = size // len(modes) + (1 if i < size % len(modes) else 0)
        if share:
            ctx.workload.burst(at, share, mode=mode)


def poison_flood(
    ctx: DrillContext, cycle: int, at: datetime, size: int, created: bool = False
) -> None:
    """`size` one-off poison runs due at `at` (created here unless `created`: a drill
    faulting the database at the same time creates them beforehand, through a healthy
    API), the fault window held until 3 s after `at`."""
    with ctx.fault("poison_flood", f"{size} poison runs", cycle):
        if not created:
            poison_jobs(ctx, at, size)
        ctx.sleep_until(int(at.timestamp() * 1000) + 3000)


def recover(ctx: DrillContext, seconds: float) -> None:
    """Let the fleet catch up after a fault: every partition owned, then `seconds`."""
    ctx.wait_partitions_covered(90)
    time.sleep(seconds)
