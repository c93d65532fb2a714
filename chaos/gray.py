"""Gray faults, each a real act on a real process, recorded as a window like chaos.nemesis'
clean ones: a process frozen (SIGSTOP: its sockets stay open, the kernel still accepts
connections and acknowledges bytes, nothing answers) for a while and then resumed, and
a worker's task found mid-work to time a fault by.

Only the drills' own processes are frozen: the drills' stack's PostgreSQL (its
postmaster, read from its own data directory, and every process below it), the drills'
stack's broker (its JVM's process group), or a service of the drill's fleet. Whatever is
frozen is listed in the context's state first, so a drill that breaks mid-fault still
resumes it (`thaw_all`, from the drills' heal_all).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator

from sqlalchemy import text

from chaos.drill import DrillContext
from chaos.fleet import descendants
from chaos.ledger import LedgerLine
from chaos.stack import StackFailure

WATCH_S = 10.0  # how long a fault waits for its moment (a task in the right phase)


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _stop_tree(root: int, below: list[int]) -> list[int]:
    """SIGSTOP `root` and `below` (its descendants, listed beforehand: a scan of /proc
    takes a while), then any new process below it until none appears (a stopped parent
    forks no more)."""
    stopped = [root, *below]
    os.kill(root, signal.SIGSTOP)
    _signal(below, signal.SIGSTOP)
    for _ in range(5):
        fresh = [pid for pid in descendants(root) if pid not in stopped]
        if not fresh:
            break
        _signal(fresh, signal.SIGSTOP)
        stopped += fresh
    return stopped


@contextlib.contextmanager
def frozen(ctx: DrillContext, pids: list[int]) -> Iterator[None]:
    """Keep `pids` (already stopped) frozen for the block, then resume them, children
    first; listed in ctx.state["frozen"] meanwhile."""
    held: list[int] = ctx.state.setdefault("frozen", [])
    held += pids
    try:
        yield
    finally:
        _signal(list(reversed(pids)), signal.SIGCONT)
        for pid in pids:
            with contextlib.suppress(ValueError):
                held.remove(pid)


def thaw_all(ctx: DrillContext) -> None:
    """Resume whatever a fault left frozen (a drill that broke mid-fault)."""
    held: list[int] = ctx.state.get("frozen", [])
    _signal(list(reversed(held)), signal.SIGCONT)
    held.clear()


def postgres_stall(ctx: DrillContext, cycle: int, hold_s: float, once: bool) -> None:
    """Freeze the drills' PostgreSQL (postmaster and every backend) for `hold_s`;
    `once`: a stall the run leases outlive, in whose cycle no run may start twice."""
    root = ctx.stack.postgres_pid()
    if root is None:
        raise StackFailure("postgres of the drills' stack is not running; nothing to freeze")
    below = descendants(root)
    with ctx.fault("postgres_stall", f"postgres {hold_s:.2f}s", cycle, once=once):
        pids = _stop_tree(root, below)
        with frozen(ctx, pids):
            time.sleep(hold_s)


def broker_stall(
    ctx: DrillContext, cycle: int, hold_s: float, during: Callable[[], None] | None = None
) -> None:
    """Freeze the drills' broker (its JVM's process group) for `hold_s`: it accepts TCP
    connections and answers nothing. `during` runs while it is frozen (a second fault,
    which must end within `hold_s`)."""
    root = ctx.stack.kafka_pid()
    if root is None:
        raise StackFailure("kafka of the drills' stack is not running; nothing to freeze")
    below = descendants(root)
    with ctx.fault("broker_stall", f"broker {hold_s:.2f}s", cycle):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(root, signal.SIGSTOP)
        pids = _stop_tree(root, below)
        with frozen(ctx, pids):
            thaw_at = time.monotonic() + hold_s
            if during is not None:
                during()
            time.sleep(max(0.0, thaw_at - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(root, signal.SIGCONT)


def service_freeze(ctx: DrillContext, cycle: int, kind: str, name: str, hold_s: float) -> None:
    """Freeze a service of the fleet (its own process group: a worker's tasks and its
    keeper run in groups of their own and go on) for `hold_s`, as a long GC pause or a
    stolen VM would; the supervisor leaves it alone (it is alive)."""
    pid = ctx.fleet.pid(name)
    with ctx.fault(kind, f"{name} {hold_s:.2f}s", cycle):
        ctx.fleet.pause(name)
        with frozen(ctx, [pid]):
            time.sleep(hold_s)
        ctx.fleet.resume(name)


def task_mid_work(
    ctx: DrillContext,
    worker: str | None = None,
    min_age_s: float = 0.5,
    max_age_s: float = 1.5,
    watch_s: float = WATCH_S,
    job_class: str | None = None,
) -> tuple[str, LedgerLine] | None:
    """Wait for a task (of `worker`, or any live one; of a job of `job_class` if given)
    that started between `min_age_s` and `max_age_s` ago and has made no effect yet: a
    long task mid-work. Returns its worker and start line, or None when none came within
    `watch_s`. The class matters on a loaded machine, where a short task (`slow`, 0.8 s)
    can still be effect-less past `min_age_s` and end before the fault it was found for."""
    starts = ctx.tail("exec.log")
    effects = ctx.tail("effects.log")
    seen: dict[str, LedgerLine] = {}
    done: set[str] = set()
    classes: dict[str, str | None] = {}
    deadline = time.monotonic() + watch_s
    while time.monotonic() < deadline:
        for line in starts.new():
            if line.event == "start" and (
                job_class is None or _class_of(ctx, line.key, classes) == job_class
            ):
                seen[line.key] = line
        done.update(line.key for line in effects.new())
        now_ms = ctx.now_ms()
        for key, line in list(seen.items()):
            age_s = (now_ms - line.at_ms) / 1000
            if key in done or age_s > max_age_s:
                seen.pop(key)
            elif age_s >= min_age_s:
                owner = ctx.worker_of_pid(line.ppid)
                if owner is not None and owner not in ctx.down and worker in (None, owner):
                    return owner, line
        time.sleep(0.02)
    return None


def _class_of(ctx: DrillContext, run_id: str, known: dict[str, str | None]) -> str | None:
    """The workload class of the run's job (`key-long-3` is of `long`), None if unknown."""
    if run_id not in known:
        with ctx.engine.connect() as conn:
            job_id = conn.execute(
                text("SELECT job_id FROM runs WHERE run_id = CAST(:run AS uuid)"),
                {"run": run_id},
            ).scalar()
        job = ctx.workload.jobs.get(str(job_id)) if job_id is not None else None
        parts = job.name.split("-") if job is not None else []
        known[run_id] = parts[1] if len(parts) >= 3 else None
    return known[run_id]


def last_renewal_ms(ctx: DrillContext, run_id: str) -> int | None:
    """When the run's lease was last set, by the database's clock: its expiry less its
    length (the job's sized lease, else the default)."""
    with ctx.engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT r.lease_expires_at - make_interval(secs => "
                "coalesce(j.lease_ttl_ms, :ttl) / 1000.0) FROM runs r "
                "LEFT JOIN jobs j ON j.job_id = r.job_id "
                "WHERE r.run_id = CAST(:run AS uuid) AND r.status = 'running'"
            ),
            {"run": run_id, "ttl": ctx.timings.run_lease_ttl_ms},
        ).scalar()
    return None if found is None else int(found.timestamp() * 1000)


def before_next_beat(ctx: DrillContext, run_id: str, beat_ms: int, early_ms: int) -> bool:
    """Sleep until `early_ms` before the next beat of the worker running `run_id`: one
    `beat_ms` after its lease is seen renewed (a worker that looks once a beat renews
    then). False if no renewal was seen within WATCH_S."""
    first = last_renewal_ms(ctx, run_id)
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        renewed = last_renewal_ms(ctx, run_id)
        if renewed is None:
            return False  # finished or gone
        if first is not None and renewed > first:
            ctx.sleep_until(renewed + beat_ms - early_ms)
            return True
        first = renewed if first is None else first
        time.sleep(0.01)
    return False


def woke_lines(ctx: DrillContext, name: str, since: int) -> list[str]:
    """What a service said on waking (kit.worker.Worker._woke), from its log after byte
    `since`."""
    path = ctx.fleet.log_dir / f"{name}.log"
    try:
        with path.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if "woke after" in line]


def log_size(ctx: DrillContext, name: str) -> int:
    try:
        return (ctx.fleet.log_dir / f"{name}.log").stat().st_size
    except OSError:
        return 0
