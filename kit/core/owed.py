"""The fires a job's schedule owed over a time range, and what became of each one.

"Why didn't my job run?" (GET /v1/jobs/{id}/explain) and backfill both start from the
same question: which fire times did the schedule owe between two instants? A job's
history is a sequence of *eras*, one per schedule (creation, then each edit that
changed the schedule or the jitter). An era's fires are exactly the ones the scheduler
walks through: the first is `next_fire(schedule, since)` and each next one follows the
last (`kit.core.trigger.next_fire_ms`), all moved by the job's jitter offset, so the
DST rule of `kit.core.schedule` applies as it does when the job fires. An era ends
when the next begins: the old schedule owes the runs it had written by the edit (the
scheduler writes them up to its scan-ahead early), and the trigger then pending is
decided by `kit.core.trigger.trigger_after_edit`, as `kit.store.jobs.job_update` does.

A fire is named by its run id (`kit.core.ids.run_id(job, trigger time)`), so matching
a fire to its run is a lookup, and a backfill of a fire already run creates nothing.

Pure: every instant is an argument.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from croniter import croniter

from kit.core.errors import FieldError
from kit.core.ids import run_id as make_run_id
from kit.core.retention import run_history_cutoff_ms
from kit.core.schedule import CronSchedule, Schedule, iter_fires, next_fire, steady
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.core.trigger import (
    QUEUED,
    SKIP_EDITED,
    SKIP_MISFIRE,
    SKIP_OVERLAP,
    SKIP_PAUSED,
    trigger_after_edit,
)

# A fire without a run is "not yet due" this long after its time: the scheduler writes
# a run ahead of its time, or up to about one partition-lease TTL late after a node
# died (10 s by default) plus a scan. Later than this, a fire without a run is missing.
DUE_GRACE_MS = 30_000
MAX_EXPLAIN_FIRES = 2000
# The widest range one explain looks over: a year and a day (a yearly job's last two
# fires). The work is bounded by MAX_EXPLAIN_FIRES already; the range bounds the runs
# read and keeps the answer about history that is kept (runs: 30 days by default).
MAX_EXPLAIN_DAYS = 366
# Ranges are asked of real history and the near future; far outside, date arithmetic
# would overflow (year 9999) long before a schedule means anything.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)

_SKIP_REASONS: dict[str, str] = {
    SKIP_PAUSED: "the job was paused",
    SKIP_OVERLAP: "a run of the job was still active (overlap: forbid)",
    SKIP_MISFIRE: "the fire was late after an outage and the misfire policy skipped it",
    SKIP_EDITED: "an edit changed the schedule while this fire was held back by its jitter",
}


def check_instant(value: datetime, field: str) -> datetime:
    """An instant a range may start or end at: 1970 to 2200 (FieldError otherwise)."""
    if not EARLIEST <= value <= LATEST:
        raise FieldError(field, f"must be between {_iso(EARLIEST)} and {_iso(LATEST)}")
    return value


def check_explain_range(start: datetime, end: datetime) -> None:
    """[start, end) is a range explain may look over (FieldError otherwise)."""
    if end <= start:
        raise FieldError("to", "must be after from")
    widest = timedelta(days=MAX_EXPLAIN_DAYS)
    if end - start > widest:
        raise FieldError(
            "from",
            f"the range spans {(end - start).days} days; explain looks over at most "
            f"{MAX_EXPLAIN_DAYS} days at a time (from {_iso(end - widest)} for this `to`)",
        )


@dataclass(frozen=True)
class ScheduleEra:
    """A schedule in force from `since` (None: the whole past) until the next era's
    `since`. `jitter_offset_ms` is the job's fixed offset (kit.core.jitter)."""

    schedule: Schedule
    since: datetime | None
    jitter_offset_ms: int = 0
    version: int | None = None  # the job version that set it (None: unknown)


@dataclass(frozen=True)
class OwedFire:
    at: datetime  # the trigger time: nominal fire + jitter (a run's scheduled_at)
    nominal: datetime  # the schedule's own fire time
    run_id: str
    era: int  # index into the eras


@dataclass(frozen=True)
class _EraBounds:
    after: datetime | None  # the era's nominal fires are those strictly after this
    until: datetime | None  # its trigger times end here (the next era's edit + written_ahead)
    edited: datetime | None  # a nominal fire the edit recorded as skipped ('edited')


def _bounds(eras: Sequence[ScheduleEra], written_ahead: timedelta) -> list[_EraBounds]:
    """Where each era's fires begin and end, deciding each edit as job_update does:
    fires already written when the edit landed (scan-ahead) belong to the old schedule;
    the trigger then pending goes through kit.core.trigger.trigger_after_edit, which
    carries an occurrence that was due but held back by jitter over to the new schedule
    (or records it as skipped 'edited'); otherwise the new schedule starts after the edit."""
    out: list[_EraBounds] = []
    after = eras[0].since if eras else None
    for index, era in enumerate(eras):
        if index + 1 == len(eras):
            out.append(_EraBounds(after, None, None))
            break
        edit = eras[index + 1].since
        if edit is None:
            raise ValueError("only the first era may begin in the unbounded past")
        until = edit + written_ahead
        jitter = timedelta(milliseconds=era.jitter_offset_ms)
        cursor = until - jitter  # nominal bound: the trigger time is after `until`
        if after is not None and after > cursor:
            cursor = after
        pending = next_fire(era.schedule, cursor)
        next_after: datetime = edit
        edited = None
        if pending is not None:
            nxt = eras[index + 1]
            moved = trigger_after_edit(
                to_epoch_ms(pending + jitter),
                era.jitter_offset_ms,
                nxt.schedule,
                nxt.jitter_offset_ms,
                to_epoch_ms(edit),
            )
            if moved.fire_at_ms is not None:  # the same occurrence, at the new jitter
                carried = from_epoch_ms(moved.fire_at_ms - nxt.jitter_offset_ms)
                next_after = carried - timedelta(microseconds=1)
            if moved.skipped_ms is not None:
                edited = pending
        out.append(_EraBounds(after, until, edited))
        after = next_after
    return out


def owed_fires(
    job_id: str,
    eras: Sequence[ScheduleEra],
    start: datetime,
    end: datetime,
    limit: int,
    written_ahead_ms: int = 0,
) -> list[OwedFire]:
    """Fires with a trigger time in [start, end), oldest first, at most `limit` (ask for
    one more than you allow to learn that there are more). Eras must be in order.
    `written_ahead_ms`: how far ahead of its time the scheduler writes a run (its
    scan-ahead), so how far past an edit the old schedule's runs already exist."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("start and end must be aware datetimes")
    if limit < 0:
        raise ValueError("limit must not be negative")
    out: list[OwedFire] = []
    bounds = _bounds(eras, timedelta(milliseconds=written_ahead_ms))
    tick = timedelta(microseconds=1)
    # Each era's first `limit` fires, then the oldest `limit` of all: an era's 'edited'
    # fire can come after the next era's first fires, so no era may stop the walk early.
    # Once `limit` fires are known, a later era's walk stops at the latest of them (a
    # fire past it cannot be among the oldest `limit`), so the walks of all eras
    # together take about `limit` fires, not `limit` per era.
    cut: datetime | None = None
    for index, (era, bound) in enumerate(zip(eras, bounds, strict=True)):
        jitter = timedelta(milliseconds=era.jitter_offset_ms)
        # Nominal instants whose trigger time is at or after `start`.
        cursor = start - jitter - tick
        if bound.after is not None and bound.after > cursor:
            cursor = bound.after
        # ...and before `end`, and at or before what the old schedule made before its
        # edit (`until`), and at or before the cut
        last = end - jitter - tick
        if bound.until is not None:
            last = min(last, bound.until - jitter)
        if cut is not None:
            last = min(last, cut - jitter)
        for nominal in itertools.islice(iter_fires(era.schedule, cursor, last), limit):
            at = nominal + jitter
            out.append(OwedFire(at, nominal, make_run_id(job_id, at), index))
        if bound.edited is not None:
            at = bound.edited + jitter
            if start <= at < end:
                out.append(OwedFire(at, bound.edited, make_run_id(job_id, at), index))
        if len(out) >= limit:
            out.sort(key=lambda f: f.at)
            del out[limit:]
            cut = out[-1].at if out else None
    out.sort(key=lambda f: f.at)
    return out[:limit]


class Outcome(StrEnum):
    ran = "ran"  # a run exists (its status says how far it got)
    skipped = "skipped"  # the scheduler recorded the fire as skipped, with the reason
    not_yet_due = "not_yet_due"  # in the future, or too recent to have a run yet
    missing = "missing"  # due, no run: a bug (or a run dropped by retention)


@dataclass(frozen=True)
class RunView:
    """What explain needs of a run row."""

    run_id: str
    status: str
    skip_reason: str | None = None
    trigger_kind: str = "schedule"
    attempt: int = 1
    error: str | None = None


@dataclass(frozen=True)
class Explained:
    fire: OwedFire
    outcome: Outcome
    run: RunView | None
    reason: str | None  # why, in words, when the outcome needs one


def explain_fires(
    owed: Sequence[OwedFire],
    runs: Mapping[str, RunView],
    now: datetime,
    due_grace_ms: int = DUE_GRACE_MS,
) -> list[Explained]:
    """What became of each owed fire, judged at `now` from the job's runs by id."""
    grace = timedelta(milliseconds=due_grace_ms)
    out: list[Explained] = []
    for fire in owed:
        run = runs.get(fire.run_id)
        if run is None:
            if fire.at > now - grace:
                why = "its time has not come" if fire.at > now else "due moments ago"
                out.append(Explained(fire, Outcome.not_yet_due, None, why))
            else:
                out.append(
                    Explained(fire, Outcome.missing, None, "no run was recorded for this fire")
                )
            continue
        if run.status == "skipped":
            reason = run.skip_reason or "skipped"
            out.append(Explained(fire, Outcome.skipped, run, _SKIP_REASONS.get(reason, reason)))
            continue
        out.append(Explained(fire, Outcome.ran, run, _ran_reason(run)))
    return out


def _ran_reason(run: RunView) -> str | None:
    if run.status == "pending" and run.skip_reason == QUEUED:
        return "queued behind an active run of the job (overlap: queue)"
    if run.trigger_kind == "backfill":
        return "run by a backfill"
    if run.status in ("dead", "cancelled") and run.error:
        return run.error
    return None


def dst_note(schedule: Schedule, nominal: datetime) -> str | None:
    """How the DST rule shaped this fire, in words, or None when it did not."""
    if not isinstance(schedule, CronSchedule):
        return None
    zone = schedule.zone
    if steady(zone, nominal):
        # no UTC-offset change within 3 h: the wall time exists and happens once (a
        # shifted fire lands within the gap's length after its change, a repeated one
        # within the hour before it); croniter.match costs ~0.5 ms a fire
        return None
    local = nominal.astimezone(zone)
    wall = local.replace(tzinfo=None)
    if not croniter.match(schedule.expr, wall):
        return (
            "the wall-clock time did not exist (clocks sprang forward): fired once, "
            f"moved forward by the gap to {wall:%H:%M}"
        )
    other = wall.replace(tzinfo=zone, fold=1 - local.fold)
    if other.utcoffset() != local.utcoffset():
        if schedule.fixed_time:
            return "the wall-clock time happened twice (clocks fell back): fired at the first only"
        return "the wall-clock time happened twice (clocks fell back): fired at both"
    return None


@dataclass(frozen=True)
class BackfillPlan:
    fires: list[OwedFire]


def plan_backfill(
    job_id: str,
    eras: Sequence[ScheduleEra],
    start: datetime,
    end: datetime,
    now: datetime,
    max_runs: int,
    written_ahead_ms: int = 0,
    run_retention_s: int | None = None,
) -> BackfillPlan:
    """The fires a backfill of [start, end) asks for. The range must be in the past (a
    future fire is the scheduler's to make), within the run history's retention (a run
    scheduled before it would be written, run and then expired by the next maintenance
    pass: refused rather than done and silently dropped), and owe at most `max_runs`
    fires. Before the job existed, the schedule it was created with is taken as owed
    (that is what a backfill of a new job is for)."""
    if end <= start:
        raise FieldError("to", "must be after from")
    if end > now:
        raise FieldError("to", f"is in the future; a backfill ends at most now ({_iso(now)})")
    if run_retention_s is not None:
        kept_from = from_epoch_ms(run_history_cutoff_ms(to_epoch_ms(now), run_retention_s))
        if start < kept_from:
            days = run_retention_s / 86_400
            raise FieldError(
                "from",
                f"is before {_iso(kept_from)}: run history is kept "
                f"{days:g} day{'' if days == 1 else 's'} (CRONFLEET_RUN_RETENTION_S), so runs "
                "scheduled earlier would be expired by the next maintenance pass; "
                f"backfill from {_iso(kept_from)} or later",
            )
    if eras:
        first = eras[0]
        eras = [ScheduleEra(first.schedule, None, first.jitter_offset_ms, first.version), *eras[1:]]
    fires = owed_fires(job_id, eras, start, end, max_runs + 1, written_ahead_ms)
    if len(fires) > max_runs:
        raise FieldError(
            "to",
            f"the range owes more than {max_runs} fires (the most one backfill may ask for); "
            "backfill a shorter range",
        )
    return BackfillPlan(fires)


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")
