"""The crash points: named places between the steps of the kit's multi-step writes where
a test may make a service die (SIGKILL, from inside), to prove that a crash at any of
them loses nothing, duplicates no effect and lets no stale write through.

The names are a closed set. Each sits at one call site (`kit.crash.crash_point(name)`,
one line); `tests/unit/test_crash_points.py` holds the call sites and this table equal,
and fails when a transaction of the run path with more than one statement names no
point. `tests/crash/` kills a real scheduler, worker, reaper, maintenance and API
process at every point in turn. A point inside a transaction proves its writes commit
together (the database rolls back what a dead client left); one between two
transactions proves the step between them is safe to lose.

`CRONFLEET_CRASH_AT=name[:nth]` arms one point in a process (die the nth time it is
reached; the first by default). Unset, nothing happens: production never sets it.

`python -m kit.core.crash_points` prints the table of docs/testing.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.core.errors import FieldError

SETTING = "CRONFLEET_CRASH_AT"


@dataclass(frozen=True)
class CrashPoint:
    name: str
    service: str  # the process that reaches it: scheduler | worker | reaper | maintenance | api
    written: str  # what is written when the process dies here, and what is not


CRASH_POINTS: tuple[CrashPoint, ...] = (
    # scheduler: partition leases (kit.scheduler.leases)
    CrashPoint(
        "partition_lease.member",
        "scheduler",
        "membership beat committed; leases not yet taken or renewed",
    ),
    CrashPoint(
        "partition_lease.acquired",
        "scheduler",
        "leases taken or renewed (committed); the node has not recorded their epochs",
    ),
    CrashPoint(
        "partition_lease.released",
        "scheduler",
        "leases of partitions moving away released (committed); not yet forgotten",
    ),
    # scheduler: the fenced scan (kit.scheduler.scan), one transaction, then the publish
    CrashPoint(
        "scan.on_time_triggers_advanced",
        "scheduler",
        "the on-time fires' triggers moved in place, their runs not yet inserted (one "
        "transaction: rolled back)",
    ),
    CrashPoint(
        "scan.on_time_runs_written",
        "scheduler",
        "the on-time fires' triggers moved and runs inserted (COPY), the rest of the batch "
        "not yet written (rolled back)",
    ),
    CrashPoint(
        "scan.runs_written",
        "scheduler",
        "runs inserted, their triggers not yet advanced (one transaction: rolled back)",
    ),
    CrashPoint(
        "scan.rearmed",
        "scheduler",
        "retries re-armed to pending, triggers not yet advanced (rolled back)",
    ),
    CrashPoint(
        "scan.triggers_advanced",
        "scheduler",
        "runs inserted and triggers advanced, not committed (rolled back)",
    ),
    CrashPoint(
        "scan.committed",
        "scheduler",
        "the scan committed; its runs not yet published (the reaper's to publish)",
    ),
    # worker: claim and start (kit.worker.worker)
    CrashPoint(
        "claim.committed",
        "worker",
        "runs claimed (committed); the queue's offsets not committed (redelivered)",
    ),
    CrashPoint(
        "claim.read_past_published",
        "worker",
        "runs of a tenant over its share published again at the tail, unclaimed; the "
        "offsets not committed (redelivered: a run's second message claims nothing)",
    ),
    CrashPoint(
        "claim.offsets_committed",
        "worker",
        "runs claimed, the offsets' commit sent (it may land or not); nothing held: the "
        "leases run out",
    ),
    CrashPoint(
        "start.begun",
        "worker",
        "a run's start journaled; its task not started (the lease runs out)",
    ),
    CrashPoint(
        "start.effect_done",
        "worker",
        "a task returned (its effect made); its outcome not written (run again)",
    ),
    # worker: finishes (kit.store.claims)
    CrashPoint(
        "finish.runs_written",
        "worker",
        "successes written, their outputs and the jobs' dead streaks not yet (rolled back)",
    ),
    CrashPoint(
        "finish.queued_released",
        "worker",
        "successes written and queued runs released, not committed (rolled back)",
    ),
    CrashPoint(
        "finish.queued_published",
        "worker",
        "released queued runs published, not marked published (published again)",
    ),
    CrashPoint(
        "finish_failed.retry_written",
        "worker",
        "a failed run written retry_scheduled, its retry trigger not yet (rolled back)",
    ),
    CrashPoint(
        "finish_failed.dead_written",
        "worker",
        "a failed run written dead, its dead letter not yet (rolled back)",
    ),
    CrashPoint(
        "finish_failed.dead_lettered",
        "worker",
        "a dead run and its dead letter written, the job's streak not yet (rolled back)",
    ),
    CrashPoint(
        "give_back.returned",
        "worker",
        "unstarted runs given back (committed), not published again (the reaper's)",
    ),
    # reaper (kit.store.reaping): one transaction per query, the publish inside it
    CrashPoint(
        "reap.dead_written",
        "reaper",
        "expired last attempts written dead, the others not yet re-queued (rolled back)",
    ),
    CrashPoint(
        "reap.requeued",
        "reaper",
        "expired runs re-queued, not published (rolled back)",
    ),
    CrashPoint(
        "reap.published",
        "reaper",
        "re-queued runs published, not marked nor committed (rolled back: a message "
        "that claims nothing)",
    ),
    CrashPoint(
        "republish.orphans_released",
        "reaper",
        "orphaned queued runs released, nothing published (rolled back)",
    ),
    CrashPoint(
        "republish.published",
        "reaper",
        "unclaimed runs published, not marked (rolled back: published again)",
    ),
    # maintenance: the run history's days (kit.store.run_history)
    CrashPoint(
        "run_history.day_created",
        "maintenance",
        "a day's partition created, the default partition's rows of it not moved back "
        "(rolled back)",
    ),
    CrashPoint(
        "run_history.day_detached",
        "maintenance",
        "a day detached, its kept runs not yet copied out (rolled back: the day whole)",
    ),
    # api: the pull queue (kit.store.queues), decided by kit.core.queue_task
    CrashPoint(
        "queue.lease_decided",
        "api",
        "tasks to lease read and decided, not written (rolled back)",
    ),
    CrashPoint(
        "queue.ack_decided",
        "api",
        "acks read and decided, not written (rolled back: the ack is retried)",
    ),
    CrashPoint(
        "queue.nack_decided",
        "api",
        "a nack read and decided, not written (rolled back)",
    ),
    CrashPoint(
        "queue.heartbeat_decided",
        "api",
        "a lease extension read and decided, not written (rolled back)",
    ),
)

NAMES: frozenset[str] = frozenset(p.name for p in CRASH_POINTS)
SERVICES: tuple[str, ...] = ("scheduler", "worker", "reaper", "maintenance", "api")


def points_of(service: str) -> tuple[str, ...]:
    """The points a service's process reaches, in the table's order."""
    if service not in SERVICES:
        raise ValueError(f"service: one of {', '.join(SERVICES)}")
    return tuple(p.name for p in CRASH_POINTS if p.service == service)


def parse_crash_at(text: str) -> tuple[str, int] | None:
    """`name[:nth]` -> (name, nth): the armed point and on which passage to die (the
    first by default); empty -> None (nothing armed). An unknown name or a bad count is
    refused, naming the setting: a typo must not leave a test killing nothing."""
    text = text.strip()
    if not text:
        return None
    name, sep, nth_text = text.partition(":")
    if name not in NAMES:
        raise FieldError(SETTING, f"{name!r} is not a crash point (kit.core.crash_points)")
    if not sep:
        return name, 1
    if not nth_text.isdigit() or int(nth_text) < 1:
        raise FieldError(SETTING, f"{nth_text!r} after ':' must be a count of at least 1")
    return name, int(nth_text)


def render_table() -> str:
    """The points as docs/testing.md lists them (a test holds the page equal to this)."""
    lines = ["| point | service | a crash there leaves |", "| --- | --- | --- |"]
    lines += [f"| `{p.name}` | {p.service} | {p.written} |" for p in CRASH_POINTS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_table(), end="")
