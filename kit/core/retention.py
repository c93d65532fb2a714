"""What the maintenance service may expire, and when: the rules, as pure predicates.

The store's DELETE statements (kit.store.maintenance) say the same thing in SQL over
indexes; an integration test holds the two equal on the same rows. The rules never
drop what the kit still needs:

- an idempotency key is only needed while a client may retry its create: it expires
  `idempotency_key_s` after it was used;
- a queue task expires `queue_task_s` after it *finished* (done or dead); a queued or
  leased task never expires, however old;
- a dead letter not replayed is kept `dead_letter_s` after the run died, replayed or
  not acted on; a replayed one is kept while its run is live (pending, running or
  waiting for a retry: the run's attempt budget is read from it) and then
  `replayed_dead_letter_s` after the replay;
- a job audit entry expires `audit_s` after it was written;
- a console session expires at its `expires_at`;
- an attempt's output excerpt expires `run_output_s` after the attempt finished (the run
  stays, with its error; only what it printed goes);
- a failure notification expires `notification_s` after it was made, once it was sent
  or given up; one still to send never expires;
- a run's history is kept `run_s` after its scheduled day ends, a day's partition at a
  time, except a run still live or with a dead letter (below).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from kit.core.leases import BUSY
from kit.core.notify import FINISHED_NOTIFICATIONS
from kit.core.queue_task import FINISHED

# Run statuses for which a replayed dead letter is still read (its attempt base).
LIVE_RUN_STATUSES = tuple(sorted(s.value for s in BUSY))
FINISHED_TASK_STATUSES = tuple(sorted(s.value for s in FINISHED))
FINISHED_NOTIFICATION_STATUSES = tuple(sorted(s.value for s in FINISHED_NOTIFICATIONS))


@dataclass(frozen=True)
class Retention:
    idempotency_key_s: int = 86_400
    queue_task_s: int = 7 * 86_400
    dead_letter_s: int = 30 * 86_400
    replayed_dead_letter_s: int = 86_400
    audit_s: int = 400 * 86_400
    run_s: int = 30 * 86_400
    run_output_s: int = 7 * 86_400
    notification_s: int = 7 * 86_400

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number of seconds >= 0")


def _older(instant: datetime | None, now: datetime, seconds: int) -> bool:
    return instant is not None and instant <= now - timedelta(seconds=seconds)


def idempotency_key_expired(created_at: datetime, now: datetime, r: Retention) -> bool:
    return _older(created_at, now, r.idempotency_key_s)


def queue_task_expired(
    status: str, finished_at: datetime | None, now: datetime, r: Retention
) -> bool:
    return status in FINISHED_TASK_STATUSES and _older(finished_at, now, r.queue_task_s)


def dead_letter_expired(
    created_at: datetime,
    replayed_at: datetime | None,
    run_status: str | None,
    now: datetime,
    r: Retention,
) -> bool:
    """`run_status` None: the run row is gone (its history was dropped)."""
    if replayed_at is None:
        return _older(created_at, now, r.dead_letter_s)
    if run_status in LIVE_RUN_STATUSES:
        return False
    return _older(replayed_at, now, r.replayed_dead_letter_s)


def audit_entry_expired(at: datetime, now: datetime, r: Retention) -> bool:
    return _older(at, now, r.audit_s)


def run_output_expired(finished_at: datetime, now: datetime, r: Retention) -> bool:
    return _older(finished_at, now, r.run_output_s)


def notification_expired(status: str, created_at: datetime, now: datetime, r: Retention) -> bool:
    return status in FINISHED_NOTIFICATION_STATUSES and _older(created_at, now, r.notification_s)


# -- run history: one partition of `runs` per UTC day ------------------------------------
#
# A day's partition holds the runs scheduled that day (their ids say when:
# kit.core.ids). It is created `ahead_days` before the day begins and dropped once the
# whole day is older than the run retention; a run that is still live then (pending,
# running, waiting for its retry) or has a dead letter is kept, moved to the default
# partition, and deleted from there once that no longer holds.

DAY_MS = 86_400_000
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


def day_of_ms(ms: int) -> date:
    """The UTC day an instant falls in."""
    return date.fromordinal(EPOCH_ORDINAL + ms // DAY_MS)


def day_bounds_ms(day: date) -> tuple[int, int]:
    """The day's instants: [start, end) in epoch ms."""
    start = (day.toordinal() - EPOCH_ORDINAL) * DAY_MS
    return start, start + DAY_MS


def run_days_wanted(now_ms: int, ahead_days: int) -> list[date]:
    """The days that should have a partition now: yesterday (a late scan just after
    midnight) to `ahead_days` after today. Older days are not created after the fact:
    a run due on a day without a partition (a backfill of last month) lands in the
    default partition, which is correct, only not dropped wholesale."""
    if ahead_days < 0:
        raise ValueError("ahead_days must be >= 0")
    today = day_of_ms(now_ms).toordinal()
    return [date.fromordinal(o) for o in range(today - 1, today + ahead_days + 1)]


def run_history_cutoff_ms(now_ms: int, retention_s: int) -> int:
    """Runs scheduled before this instant are past the retention: the start of the day
    that `retention_s` ago falls in (a day expires whole, when its last run is old
    enough)."""
    return day_bounds_ms(day_of_ms(max(0, now_ms - retention_s * 1000)))[0]


def run_day_expired(day: date, now_ms: int, retention_s: int) -> bool:
    """Whether every run of the day is older than the retention (scheduled time)."""
    return day_bounds_ms(day)[1] <= run_history_cutoff_ms(now_ms, retention_s)


def run_kept_past_retention(status: str, has_dead_letter: bool) -> bool:
    """A run the kit still needs, however old: a live one (the scheduler, a worker or
    the reaper acts on it), or one with a dead letter (listed and replayed from it)."""
    return status in LIVE_RUN_STATUSES or has_dead_letter


@dataclass(frozen=True)
class RunDaysPlan:
    """What one maintenance pass does to the run history's day partitions."""

    create: tuple[date, ...]
    drop: tuple[date, ...]


def plan_run_days(
    now_ms: int, existing: Iterable[date], ahead_days: int, retention_s: int
) -> RunDaysPlan:
    """Create the wanted days that are missing (never one already expired), drop the
    existing days that expired, oldest first."""
    if retention_s < 0:
        raise ValueError("retention_s must be >= 0")
    have = set(existing)
    create = [
        d
        for d in run_days_wanted(now_ms, ahead_days)
        if d not in have and not run_day_expired(d, now_ms, retention_s)
    ]
    drop = sorted(d for d in have if run_day_expired(d, now_ms, retention_s))
    return RunDaysPlan(tuple(create), tuple(drop))
