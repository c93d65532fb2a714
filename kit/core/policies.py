"""What a job chose to happen after an outage (misfire) and when runs overlap."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from kit.core.errors import FieldError


class MisfireKind(StrEnum):
    """What a job does with fire times an outage made it miss."""

    run_all = "run_all"  # fire every missed time
    run_once = "run_once"  # fire the latest, skip the others
    skip_late = "skip_late"  # fire those within the deadline, skip the older ones


MISFIRE_KINDS: tuple[str, ...] = tuple(k.value for k in MisfireKind)
MAX_DEADLINE_S = 86_400 * 7


@dataclass(frozen=True)
class MisfirePolicy:
    kind: str = "run_once"
    deadline_s: int = 60  # skip_late: fire a missed time at most this far behind now

    def __post_init__(self) -> None:
        if self.kind not in MISFIRE_KINDS:
            raise FieldError("misfire.kind", f"must be one of {', '.join(MISFIRE_KINDS)}")
        d = self.deadline_s
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_DEADLINE_S:
            raise FieldError(
                "misfire.deadline_s", f"must be a whole number between 0 and {MAX_DEADLINE_S}"
            )

    @classmethod
    def parse(cls, data: Mapping[str, object] | str | None) -> MisfirePolicy:
        """`{"kind": ..., "deadline_s": ...}`, or just the kind as a string."""
        if data is None:
            return cls()
        if isinstance(data, str):
            return cls(kind=data)
        if not isinstance(data, Mapping):
            raise FieldError("misfire", "must be an object with 'kind'")
        extra = sorted(set(data) - {"kind", "deadline_s"})
        if extra:
            raise FieldError(f"misfire.{extra[0]}", "unknown field")
        return cls(
            kind=data.get("kind", cls.kind),  # type: ignore[arg-type]
            deadline_s=data.get("deadline_s", cls.deadline_s),  # type: ignore[arg-type]
        )

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "deadline_s": self.deadline_s}


@dataclass(frozen=True)
class MisfirePlan:
    fire_ms: list[int] = field(default_factory=list)
    skipped_ms: list[int] = field(default_factory=list)


def plan_misfire(missed_ms: Sequence[int], now_ms: int, policy: MisfirePolicy) -> MisfirePlan:
    """Split fire times already in the past into those to fire and those recorded as
    skipped. Every missed time lands in exactly one of the two lists (ascending)."""
    missed = sorted(missed_ms)
    if not missed:
        return MisfirePlan()
    if policy.kind == "run_all":
        return MisfirePlan(missed, [])
    if policy.kind == "run_once":
        return MisfirePlan(missed[-1:], missed[:-1])
    limit_ms = policy.deadline_s * 1000
    fire = [t for t in missed if now_ms - t <= limit_ms]
    skipped = [t for t in missed if now_ms - t > limit_ms]
    return MisfirePlan(fire, skipped)


class OverlapPolicy(StrEnum):
    allow = "allow"
    forbid = "forbid"
    queue = "queue"
    # The member's name is the stored and public value (psycopg writes a member by name),
    # so it keeps the name that shadows str.replace on its members; nothing calls that.
    replace = "replace"  # type: ignore[assignment]

    @classmethod
    def parse(cls, value: object, field: str = "overlap") -> OverlapPolicy:
        if value is None:
            return cls.allow
        names = ", ".join(p.value for p in cls)
        if not isinstance(value, str):
            raise FieldError(field, f"must be one of {names}")
        try:
            return cls(value)
        except ValueError:
            raise FieldError(field, f"must be one of {names}") from None


class OverlapAction(StrEnum):
    fire = "fire"
    skip = "skip"
    queue = "queue"
    fire_and_cancel_running = "fire_and_cancel_running"


def decide_overlap(policy: OverlapPolicy, running_count: int) -> OverlapAction:
    """What to do with a run that is due while `running_count` runs of its job run."""
    if running_count < 0:
        raise ValueError("running_count must not be negative")
    if running_count == 0 or policy is OverlapPolicy.allow:
        return OverlapAction.fire
    if policy is OverlapPolicy.forbid:
        return OverlapAction.skip
    if policy is OverlapPolicy.queue:
        return OverlapAction.queue
    return OverlapAction.fire_and_cancel_running


def may_hold_queued_runs(policy: str | None) -> bool:
    """Whether a job can have runs held back for it (`decide_overlap` answered `queue`),
    so that a finish of one of its runs should look for the next: only under `queue`, or
    when the policy is unknown (the job was deleted). A job whose policy changed away
    from `queue` while runs were held is left to the reaper's release of orphans."""
    return policy is None or policy == OverlapPolicy.queue.value


@dataclass(frozen=True)
class QueuedRun:
    """A run held back by `decide_overlap`'s `queue` (pending, marker `queued`)."""

    run_id: str
    scheduled_at_ms: int
    created_at_ms: int  # when the scan committed it (the reaper's grace counts from it)


def queue_order(run: QueuedRun) -> tuple[int, str]:
    """Queued runs go oldest first: by scheduled time, ties by run id (the store's
    `ORDER BY scheduled_at, run_id`, served by the partial index of queued runs)."""
    return (run.scheduled_at_ms, run.run_id)


def queued_to_release(queued: Iterable[QueuedRun], ended: int) -> list[str]:
    """`ended` runs of a job that may queue (`may_hold_queued_runs`) ended: succeeded,
    went dead or were cancelled. As many of its queued runs, oldest first, lose the
    marker and are published; each keeps the job busy in turn. A failure that awaits
    its retry, or an expiry that re-queues the run, ends nothing: the job stays busy."""
    if ended < 0:
        raise ValueError("ended must not be negative")
    return [r.run_id for r in sorted(queued, key=queue_order)[:ended]]


def orphaned_queued_to_release(
    queued: Iterable[QueuedRun], busy_unqueued: int, now_ms: int, grace_ms: int
) -> str | None:
    """The reaper's safety net: a finish that committed just before the scan that queued
    a run saw nothing to release. With no run of the job busy but queued ones
    (`busy_unqueued` == 0), its oldest queued run committed more than `grace_ms` ago is
    released; None when there is none."""
    if busy_unqueued > 0:
        return None
    old = [r for r in queued if r.created_at_ms < now_ms - grace_ms]
    return min(old, key=queue_order).run_id if old else None
