"""GET /v1/next-fires: preview a schedule over HTTP, as `cronfleet next-fires` does on the
command line (the same kit.core code the scheduler runs, DST rule included)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from kit.api.auth import principal
from kit.core.errors import FieldError, FieldErrors
from kit.core.owed import check_instant, dst_note
from kit.core.schedule import CronSchedule, next_fires, parse_instant, parse_schedule
from kit.core.schedule import schedule_to_dict as _to_dict

router = APIRouter(prefix="/v1", dependencies=[Depends(principal)], tags=["schedules"])
MAX_COUNT = 1000


class PreviewFireOut(BaseModel):
    utc: datetime
    local: str = Field(description="in the schedule's time zone, with its UTC offset")
    dst: str | None = Field(description="how the DST rule shaped this fire, if it did")


class PreviewOut(BaseModel):
    schedule: dict[str, Any]
    after: datetime
    fires: list[PreviewFireOut]


def preview(data: dict[str, Any], after: datetime, count: int) -> PreviewOut:
    """The next `count` fires of a schedule given as a job's `schedule` object."""
    try:
        schedule = parse_schedule(data, now=after)
    except FieldError as exc:  # the fields are query parameters here, not schedule.*
        problems = [(f.removeprefix("schedule."), r) for f, r in exc.problems]
        raise (FieldErrors(problems) if len(problems) > 1 else FieldError(*problems[0])) from None
    zone = schedule.zone if isinstance(schedule, CronSchedule) else UTC
    try:
        fires = next_fires(schedule, after, count)
    except (OverflowError, ValueError) as exc:  # a schedule running past the year 9999
        raise FieldError("count", "the fires run past the last representable time") from exc
    return PreviewOut(
        schedule=_to_dict(schedule),
        after=after,
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
def next_fires_preview(
    cron: Annotated[str | None, Query(description="cron expression, e.g. `30 2 * * *`")] = None,
    timezone: Annotated[str | None, Query(description="IANA zone for cron (default UTC)")] = None,
    every_s: Annotated[int | None, Query(description="fixed interval in seconds")] = None,
    anchor: Annotated[str | None, Query(description="interval anchor (ISO 8601)")] = None,
    at: Annotated[str | None, Query(description="one-off time (ISO 8601)")] = None,
    after: Annotated[str | None, Query(description="ISO 8601 with offset; default now")] = None,
    count: Annotated[int, Query(ge=1, le=MAX_COUNT)] = 5,
) -> PreviewOut:
    """Exactly one of `cron`, `every_s` or `at`; the answer lists each fire in UTC and in
    the schedule's zone, and says where a DST change moved or merged a fire."""
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
    return preview(data, start, count)
