"""GET /v1/next-fires: preview a schedule over HTTP, as `cronfleet next-fires` does on the
command line (the same kit.core code the scheduler runs, DST rule included)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from kit.api.auth import principal
from kit.api.compute import cpu_bound
from kit.api.declared import CRON, HISTORY_INSTANT, INSTANT, INSTANT_DOC, TIMEZONE
from kit.core.errors import FieldError, FieldErrors
from kit.core.owed import check_instant, dst_note
from kit.core.schedule import (
    MAX_CRON_CHARS,
    MAX_INTERVAL_S,
    MAX_TIMEZONE_CHARS,
    MIN_INTERVAL_S,
    CronSchedule,
    next_fires,
    parse_instant,
    parse_schedule,
)
from kit.core.schedule import schedule_to_dict as _to_dict

router = APIRouter(prefix="/v1", dependencies=[Depends(principal)], tags=["schedules"])
MAX_COUNT = 1000
# How far past `after` a preview looks for fires: a schedule that fires rarer than
# `count` in that span is answered with the fires it has there. With the count, this
# bounds one preview's work (a leap-day cron once listed 1,000 fires over 4,000 years).
MAX_SPAN_YEARS = 100
_MAX_SPAN = timedelta(days=36_525)


class PreviewFireOut(BaseModel):
    utc: datetime
    local: str = Field(description="in the schedule's time zone, with its UTC offset")
    dst: str | None = Field(description="how the DST rule shaped this fire, if it did")


class PreviewOut(BaseModel):
    schedule: dict[str, Any]
    after: datetime
    until: datetime = Field(
        description=f"fires are looked for up to this instant ({MAX_SPAN_YEARS} years after "
        "`after`): fewer than `count` fires means none other before it"
    )
    fires: list[PreviewFireOut]


def preview(data: dict[str, Any], after: datetime, count: int) -> PreviewOut:
    """The next `count` fires of a schedule given as a job's `schedule` object."""
    try:
        schedule = parse_schedule(data, now=after)
    except FieldError as exc:  # the fields are query parameters here, not schedule.*
        problems = [(f.removeprefix("schedule."), r) for f, r in exc.problems]
        raise (FieldErrors(problems) if len(problems) > 1 else FieldError(*problems[0])) from None
    zone = schedule.zone if isinstance(schedule, CronSchedule) else UTC
    until = after + _MAX_SPAN
    try:
        fires = next_fires(schedule, after, count, until)
    except (OverflowError, ValueError) as exc:  # a schedule running past the year 9999
        raise FieldError("count", "the fires run past the last representable time") from exc
    return PreviewOut(
        schedule=_to_dict(schedule),
        after=after,
        until=until,
        fires=[
            PreviewFireOut(
                utc=fire, local=fire.astimezone(zone).isoformat(), dst=dst_note(schedule, fire)
            )
            for fire in fires
        ],
    )


@router.get(
    "/next-fires",
    response_model=PreviewOut,
    summary="Preview the next fire times of a schedule (cron with a time zone, interval, at)",
)
async def next_fires_preview(
    request: Request,
    cron: Annotated[
        str | None,
        Query(
            pattern=CRON,
            min_length=9,
            max_length=MAX_CRON_CHARS,
            description="cron expression, e.g. `30 2 * * *` (whether croniter takes it and "
            "whether it ever fires is not declared)",
        ),
    ] = None,
    timezone: Annotated[
        str | None,
        Query(
            pattern=TIMEZONE,
            max_length=MAX_TIMEZONE_CHARS,
            description="IANA zone for cron (default UTC; whether the server knows it is not "
            "declared)",
        ),
    ] = None,
    every_s: Annotated[
        int | None,
        Query(ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S, description="fixed interval in seconds"),
    ] = None,
    anchor: Annotated[
        str | None, Query(pattern=INSTANT, description=f"interval anchor ({INSTANT_DOC})")
    ] = None,
    at: Annotated[
        str | None, Query(pattern=INSTANT, description=f"one-off time ({INSTANT_DOC})")
    ] = None,
    after: Annotated[
        str | None, Query(pattern=HISTORY_INSTANT, description=f"{INSTANT_DOC}; default now")
    ] = None,
    count: Annotated[int, Query(ge=1, le=MAX_COUNT)] = 5,
) -> PreviewOut:
    """Exactly one of `cron`, `every_s` or `at`; the answer lists each fire in UTC and in
    the schedule's zone, and says where a DST change moved or merged a fire. Fires are
    looked for up to 100 years after `after` (`until` in the answer)."""
    start = check_instant(parse_instant(after, "after"), "after") if after else datetime.now(UTC)
    data: dict[str, Any] = {
        k: v
        for k, v in {
            "cron": cron,
            "timezone": timezone,
            "every_s": every_s,
            "anchor": anchor,
            "at": at,
        }.items()
        if v is not None
    }
    return await cpu_bound(request, preview, data, start, count)
