"""When a job fires: one-off, fixed interval, or cron in an IANA time zone.

DST rule (explicit, because croniter alone does not give it):
- cron is matched against local wall-clock time;
- a local time that does not exist (clocks spring forward) still fires once, shifted
  forward by the gap (02:30 on a 02:00->03:00 day fires at 03:30);
- a local time that occurs twice (clocks fall back) fires once, at its first
  occurrence, for a fixed-time job; a job whose hour field is `*` is not fixed-time
  and fires in both repeated hours, as cron does for sub-hourly work;
- interval schedules keep elapsed time and ignore the zone.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from kit.core.errors import FieldError, all_of

# Longest DST shift worth looking back over (Lord Howe is 30 min, most zones 1 h).
_MAX_SHIFT = timedelta(hours=3)
MIN_INTERVAL_S = 1
MAX_INTERVAL_S = 366 * 86_400
# Caps on what a tenant may hand the parser: croniter's cost grows with the expression,
# and the scheduler re-parses it on every fire (a 2 MB one cost seconds each time).
MAX_CRON_CHARS = 256
MAX_TIMEZONE_CHARS = 64  # the longest IANA name is about half of it
MAX_INSTANT_CHARS = 64
# Instants a schedule may name: far enough from datetime's own limits that converting
# between zones and adding an interval cannot overflow.
MIN_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
MAX_INSTANT = datetime(9999, 1, 1, tzinfo=UTC)
# Where "does it ever fire?" is asked from: a fixed instant, not a clock read. croniter
# looks 50 years ahead, so an expression that fires only on some 29 Februaries passes.
_EVER_FIRES_FROM = datetime(2001, 1, 1)


@dataclass(frozen=True)
class CronSchedule:
    expr: str
    timezone: str = "UTC"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def fixed_time(self) -> bool:
        """True when the hour field names hours, so a repeated hour must not fire twice."""
        hour = self.expr.split()[1]
        return hour not in ("*", "*/1")


@dataclass(frozen=True)
class IntervalSchedule:
    every_s: int
    anchor: datetime  # aware; fires at anchor + k * every_s


@dataclass(frozen=True)
class OneOffSchedule:
    at: datetime  # aware


Schedule = CronSchedule | IntervalSchedule | OneOffSchedule


class ScheduleKind(StrEnum):
    """Which of the three a schedule is. What a fire costs a scan depends on it: a cron
    fire computes its next time with croniter, an interval fire by arithmetic, a one-off
    fire has no next time and leaves no trigger behind (kit.scheduler.scan); the
    calibration measures each and the capacity model charges each fire by its kind."""

    cron = "cron"
    interval = "interval"
    one_off = "one_off"


def schedule_kind(schedule: Schedule) -> ScheduleKind:
    """The kind of a parsed schedule."""
    if isinstance(schedule, CronSchedule):
        return ScheduleKind.cron
    if isinstance(schedule, IntervalSchedule):
        return ScheduleKind.interval
    return ScheduleKind.one_off


def parse_timezone(name: str, field: str = "timezone") -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise FieldError(field, "must be an IANA time zone name such as 'Europe/Paris'")
    if len(name) > MAX_TIMEZONE_CHARS:
        raise FieldError(field, f"has {len(name)} characters; at most {MAX_TIMEZONE_CHARS}")
    if "\x00" in name:
        raise FieldError(field, "must not contain NUL")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise FieldError(field, f"unknown time zone {name!r}") from exc


def parse_cron(expr: str, field: str = "cron") -> str:
    if not isinstance(expr, str) or not expr.strip():
        raise FieldError(field, "must be a cron expression such as '0 * * * *'")
    if len(expr) > MAX_CRON_CHARS:
        raise FieldError(field, f"has {len(expr)} characters; at most {MAX_CRON_CHARS}")
    expr = " ".join(expr.split())
    if len(expr.split()) != 5:
        raise FieldError(field, f"{expr!r} must have 5 fields: minute hour day month weekday")
    problem = _cron_problem(expr)
    if problem is not None:
        raise FieldError(field, f"{expr!r} {problem}")
    return expr


@functools.lru_cache(maxsize=4096)
def _cron_problem(expr: str) -> str | None:
    """Why croniter refuses a 5-field expression, or None. A function of the text alone,
    kept per expression: croniter's parse and a look 50 years ahead cost ~0.3 ms, and a
    job's cron is parsed more than once per request (the API's validation, the job
    spec), with the same few expressions request after request."""
    if not croniter.is_valid(expr):
        return "is not a valid cron expression"
    try:
        croniter(expr, _EVER_FIRES_FROM).get_next(datetime)
    except CroniterBadDateError:
        return "never fires (no such day)"
    return None


def parse_instant(value: object, field: str) -> datetime:
    """An ISO 8601 instant with an offset (or `Z`); naive times are refused, not guessed."""
    if isinstance(value, datetime):
        instant = value
    elif isinstance(value, str):
        if len(value) > MAX_INSTANT_CHARS:
            raise FieldError(field, f"has {len(value)} characters; at most {MAX_INSTANT_CHARS}")
        try:
            instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise FieldError(field, f"{value!r} is not an ISO 8601 time") from exc
    else:
        raise FieldError(field, "must be an ISO 8601 time with an offset")
    if instant.tzinfo is None:
        raise FieldError(field, "needs a UTC offset or 'Z' (naive times are ambiguous)")
    return check_instant_range(instant, field)


def check_instant_range(instant: datetime, field: str) -> datetime:
    """The instant in UTC, if it lies in [MIN_INSTANT, MAX_INSTANT); else FieldError.

    Compared before converting: year 1 at +01:00 is before year 1 in UTC, which
    `astimezone` cannot represent (it raised OverflowError, a 500).
    """
    try:
        in_range = MIN_INSTANT <= instant < MAX_INSTANT
    except TypeError:  # naive
        raise FieldError(field, "needs a UTC offset or 'Z' (naive times are ambiguous)") from None
    if not in_range:
        raise FieldError(
            field,
            f"must be between {MIN_INSTANT.isoformat()} and {MAX_INSTANT.isoformat()} (exclusive)",
        )
    return instant.astimezone(UTC)


def parse_schedule(data: Mapping[str, object], now: datetime) -> Schedule:
    """Validate a schedule given as `{"cron", "timezone"}`, `{"every_s", "anchor"?}` or `{"at"}`.

    `now` anchors interval schedules that name no anchor; it is not a clock read.
    """
    if not isinstance(data, Mapping):
        raise FieldError("schedule", "must be an object with 'cron', 'every_s' or 'at'")
    kinds = [k for k in ("cron", "every_s", "at") if data.get(k) is not None]
    if len(kinds) != 1:
        raise FieldError("schedule", "give exactly one of 'cron', 'every_s' or 'at'")
    allowed = {"cron": {"cron", "timezone"}, "every_s": {"every_s", "anchor"}, "at": {"at"}}
    extra = sorted(set(data) - allowed[kinds[0]])
    if extra:
        raise FieldError(f"schedule.{extra[0]}", f"not allowed with '{kinds[0]}'")
    if kinds[0] == "cron":
        tz = data.get("timezone") or "UTC"
        # both fields checked, both reported: a bad cron does not hide a bad zone
        all_of(
            lambda: parse_cron(data["cron"], "schedule.cron"),  # type: ignore[arg-type]
            lambda: parse_timezone(tz, "schedule.timezone"),  # type: ignore[arg-type]
        )
        expr = parse_cron(data["cron"], "schedule.cron")  # type: ignore[arg-type]
        return CronSchedule(expr, str(tz))
    if kinds[0] == "every_s":
        every = data["every_s"]
        if isinstance(every, bool) or not isinstance(every, int):
            raise FieldError("schedule.every_s", "must be a whole number of seconds")
        if not MIN_INTERVAL_S <= every <= MAX_INTERVAL_S:
            raise FieldError(
                "schedule.every_s", f"must be between {MIN_INTERVAL_S} and {MAX_INTERVAL_S}"
            )
        anchor = data.get("anchor")
        anchor_at = parse_instant(anchor, "schedule.anchor") if anchor is not None else now
        return IntervalSchedule(every, anchor_at.astimezone(UTC).replace(microsecond=0))
    return OneOffSchedule(parse_instant(data["at"], "schedule.at"))


def schedule_to_dict(schedule: Schedule) -> dict[str, object]:
    """The JSON form stored in the jobs table and returned by the API."""
    if isinstance(schedule, CronSchedule):
        return {"cron": schedule.expr, "timezone": schedule.timezone}
    if isinstance(schedule, IntervalSchedule):
        return {"every_s": schedule.every_s, "anchor": schedule.anchor.isoformat()}
    return {"at": schedule.at.isoformat()}


def next_fire(schedule: Schedule, after: datetime) -> datetime | None:
    """The first fire time strictly after `after` (aware, UTC), or None when there is none
    (a one-off time passed, a cron day that never comes, the end of the calendar)."""
    if after.tzinfo is None:
        raise ValueError("after must be an aware datetime")
    if isinstance(schedule, OneOffSchedule):
        return schedule.at if schedule.at > after else None
    if isinstance(schedule, IntervalSchedule):
        step = timedelta(seconds=schedule.every_s)
        if after < schedule.anchor:
            return schedule.anchor
        k = (after - schedule.anchor) // step + 1
        try:
            return schedule.anchor + k * step
        except OverflowError:
            return None
    try:
        return _next_cron(schedule, after)
    except (CroniterBadDateError, OverflowError):
        return None


def next_fires(
    schedule: Schedule, after: datetime, count: int, until: datetime | None = None
) -> list[datetime]:
    """The first `count` fires after `after` (at or before `until`, if given)."""
    if until is not None:
        return list(itertools.islice(iter_fires(schedule, after, until), count))
    fires: list[datetime] = []
    cursor = after
    while len(fires) < count:
        nxt = next_fire(schedule, cursor)
        if nxt is None:
            break
        fires.append(nxt)
        cursor = nxt
    return fires


# The first window iter_fires asks croniter about, and how many fires a window should
# hold before it stops growing (so a consumer that stops early wasted at most one).
_FIRST_WINDOW = timedelta(hours=1)
_WINDOW_FIRES = 64


def iter_fires(schedule: Schedule, after: datetime, until: datetime) -> Iterator[datetime]:
    """The fires in (after, until], in order: what `next_fire` from `after`, again and
    again while it is at or before `until`, yields. A cron schedule is walked one window
    at a time with one croniter each (`fires_in`) instead of one croniter and one DST
    look per fire: a fire then costs ~0.06 ms instead of ~0.3 (the API's previews and
    explain list up to thousands; tests/property/test_schedule_window_props.py holds the
    two equal). A window doubles while it holds fewer than _WINDOW_FIRES fires, so a
    rare schedule is crossed in a few windows and a consumer that stops early (islice)
    has computed at most one window more than it took."""
    if until <= after:
        return
    if not isinstance(schedule, CronSchedule):
        cursor = after
        while (nxt := next_fire(schedule, cursor)) is not None and nxt <= until:
            yield nxt
            cursor = nxt
        return
    window, cursor = _FIRST_WINDOW, after
    while cursor < until:
        try:
            end = min(cursor + window, until)
        except OverflowError:
            end = until
        fires = fires_in(schedule, cursor, end)
        yield from fires
        cursor = end
        if len(fires) < _WINDOW_FIRES:
            window *= 2


def _instants(naive: datetime, zone: ZoneInfo, fixed_time: bool) -> list[datetime]:
    """The UTC instants at which a local wall-clock time happens, by the DST rule above."""
    first = naive.replace(tzinfo=zone, fold=0)
    second = naive.replace(tzinfo=zone, fold=1)
    roundtrip = first.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
    if roundtrip != naive:  # in a gap: fold=0 uses the offset before it, i.e. shifted forward
        return [first.astimezone(UTC)]
    if first.utcoffset() != second.utcoffset():  # repeated hour
        both = [first.astimezone(UTC), second.astimezone(UTC)]
        return both[:1] if fixed_time else both
    return [first.astimezone(UTC)]


def steady(zone: ZoneInfo, instant: datetime) -> bool:
    """No UTC-offset change within 3 hours of `instant` (the longest DST shift worth
    looking over; transitions are months apart)."""
    before = (instant - _MAX_SHIFT).astimezone(zone).utcoffset()
    return before == (instant + _MAX_SHIFT).astimezone(zone).utcoffset()


def _next_cron(schedule: CronSchedule, after: datetime) -> datetime:
    zone = schedule.zone
    fixed = schedule.fixed_time
    local_after = after.astimezone(zone).replace(tzinfo=None)
    # Near a transition, start a little early: in a repeated hour the answer can be a
    # wall time earlier than `after`'s own. Away from one, wall order is instant order.
    start = local_after if steady(zone, after) else local_after - _MAX_SHIFT
    it = croniter(schedule.expr, start)
    best: datetime | None = None
    horizon: datetime | None = None
    while True:
        candidate: datetime = it.get_next(datetime)
        for instant in _instants(candidate, zone, fixed):
            if instant > after and (best is None or instant < best):
                best = instant
        if best is None:
            continue
        if horizon is None:
            # A later wall time shifted out of a gap can still be an earlier instant:
            # near a transition keep looking one shift further.
            horizon = candidate if steady(zone, best) else candidate + _MAX_SHIFT
        if candidate >= horizon:
            return best


def fires_in(schedule: Schedule, after: datetime, until: datetime) -> list[datetime]:
    """Every fire time in (after, until], in order: the instants that calling `next_fire`
    from `after` until it passes `until` yields, found in one pass over the window's
    wall-clock times (the model expands a whole population's schedules window by window,
    and one `next_fire` per fire costs a croniter set-up each). Same DST rule."""
    if after.tzinfo is None or until.tzinfo is None:
        raise ValueError("after and until must be aware datetimes")
    if until <= after:
        return []
    if not isinstance(schedule, CronSchedule):
        out: list[datetime] = []
        nxt = next_fire(schedule, after)
        while nxt is not None and nxt <= until:
            out.append(nxt)
            nxt = next_fire(schedule, nxt)
        return out
    zone = schedule.zone
    fixed = schedule.fixed_time
    lo = after.astimezone(zone).replace(tzinfo=None)
    hi = until.astimezone(zone).replace(tzinfo=None)
    # Near a transition wall order is not instant order: look one shift further out.
    if not steady(zone, after):
        lo -= _MAX_SHIFT
    if not steady(zone, until):
        hi += _MAX_SHIFT
    it = croniter(schedule.expr, lo)
    found: set[datetime] = set()
    while True:
        try:
            candidate: datetime = it.get_next(datetime)
        except (CroniterBadDateError, OverflowError):
            break  # a day that never comes, or the end of the calendar: no more fires
        if candidate > hi:
            break
        for instant in _instants(candidate, zone, fixed):
            if after < instant <= until:
                found.add(instant)
    return sorted(found)
