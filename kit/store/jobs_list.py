"""A tenant's jobs (GET /v1/jobs): filtered, in name order, keyset-paginated, counted.

`name` sorts by bytes (collation "C", migration 0008), so a name prefix is a range
`name >= prefix AND name < prefix-with-its-last-character-bumped` of the unique
(tenant, name) index, and the cursor is simply the last name of the page (names are
unique per tenant). The paused, priority and task-type filters have indexes of their
own that keep the name order. Those filters are written as literals (each from a closed
list), so a prepared statement's generic plan still knows a rare value from a common
one and uses the index.

The last run of a job is its newest run scheduled at or before now (the database's
clock, or the caller's `now`), one probe of the
(job_id, scheduled_at) index per job. Filtering on it reads jobs in name order until
the page is full, so a rare status may read many jobs; the count stops at COUNT_CAP.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Select, func, literal, literal_column, not_, select, true

from kit.core.errors import FieldError
from kit.store.db import at_or_now
from kit.store.jobs import JobRecord, job_record
from kit.store.runs import RUN_STATES, run_state_sql
from kit.store.schema import PRIORITY_TIERS, jobs, runs, triggers

MAX_PAGE = 500
_CONTROL = re.compile(r"[\x00-\x1f]")  # job names have none (kit.api.models.JobIn)
COUNT_CAP = 10_000
NO_RUN = "none"  # last_status filter: jobs that never ran
_TASK_TYPE = literal_column("jobs.task_spec ->> 'type'")


@dataclass(frozen=True)
class JobFilter:
    name_prefix: str | None = None
    paused: bool | None = None
    task_type: str | None = None
    priority: str | None = None
    last_status: str | None = None  # a run status, or NO_RUN
    # the task types a filter may name: kit.tasks.registry's, given by the caller (the
    # store does not import the tasks)
    task_types: tuple[str, ...] = ()

    def check(self) -> None:
        if self.priority is not None and self.priority not in PRIORITY_TIERS:
            raise FieldError("priority", f"must be one of {', '.join(PRIORITY_TIERS)}")
        allowed = (*RUN_STATES, NO_RUN)
        if self.last_status is not None and self.last_status not in allowed:
            raise FieldError("last_status", f"must be one of {', '.join(allowed)}")
        if self.name_prefix is not None and not 1 <= len(self.name_prefix) <= 200:
            raise FieldError("name_prefix", "must be 1 to 200 characters")
        if self.name_prefix is not None and _CONTROL.search(self.name_prefix):
            raise FieldError("name_prefix", "must not contain control characters")
        if self.task_type is not None and self.task_type not in self.task_types:
            raise FieldError("task_type", f"must be one of {', '.join(self.task_types)}")


@dataclass(frozen=True)
class LastRun:
    run_id: str
    status: str
    scheduled_at: datetime


@dataclass(frozen=True)
class JobListPage:
    jobs: list[tuple[JobRecord, LastRun | None]]
    next_cursor: str | None
    count: int
    count_exact: bool  # False: at least `count` (COUNT_CAP) jobs match


def _cursor_encode(name: str) -> str:
    return base64.urlsafe_b64encode(("n:" + name).encode()).decode().rstrip("=")


def _cursor_decode(cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise FieldError("cursor", "is not a cursor returned by this API") from exc
    if not raw.startswith("n:") or _CONTROL.search(raw):
        raise FieldError("cursor", "is not a cursor returned by this API")
    return raw[2:]


def prefix_upper(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix`, in code
    point order (which is UTF-8 byte order, the "C" collation); None when unbounded."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            bumped = last + 1
            if 0xD800 <= bumped <= 0xDFFF:  # surrogates are not characters
                bumped = 0xE000
            return "".join(chars) + chr(bumped)
    return None


def _last_run(now: datetime | None) -> Any:
    return (
        # the status shown: a run held for its second is `claimed` (kit.core.run_state)
        select(runs.c.run_id, literal_column(run_state_sql()).label("status"), runs.c.scheduled_at)
        .where(runs.c.job_id == jobs.c.job_id, runs.c.scheduled_at <= at_or_now(now))
        .order_by(runs.c.scheduled_at.desc(), runs.c.run_id.desc())
        .limit(1)
        .lateral("last_run")
    )


def _filtered(
    tenant: str, f: JobFilter, columns: list[Any], with_last_run: bool, now: datetime | None
) -> Select[Any]:
    """The filtered jobs; the last-run lateral join only where it is shown or filtered on
    (a count without the last-status filter reads the jobs' index alone)."""
    if with_last_run or f.last_status is not None:
        last = _last_run(now)
        query = select(*columns, last.c.run_id, last.c.status, last.c.scheduled_at).select_from(
            jobs.outerjoin(last, true())
        )
        if f.last_status == NO_RUN:
            query = query.where(last.c.status.is_(None))
        elif f.last_status is not None:
            query = query.where(last.c.status == f.last_status)
    else:
        query = select(*columns)
    query = query.where(jobs.c.tenant == tenant)
    if f.name_prefix:
        query = query.where(jobs.c.name >= f.name_prefix)
        upper = prefix_upper(f.name_prefix)
        if upper is not None:
            query = query.where(jobs.c.name < upper)
    if f.paused is True:
        query = query.where(jobs.c.paused)
    elif f.paused is False:
        query = query.where(not_(jobs.c.paused))
    # Literals, not parameters: a prepared statement's generic plan cannot tell a rare
    # value from a common one and walked the name index (95 ms for a 1% task type at
    # 200,000 jobs, 8 ms with the literal). Both come from a closed list checked above.
    if f.priority is not None:
        query = query.where(jobs.c.priority == literal(f.priority, literal_execute=True))
    if f.task_type is not None:
        query = query.where(
            _TASK_TYPE == literal(f.task_type, literal_execute=True)  # noqa: SIM300
        )
    return query


def jobs_list(
    engine: Engine,
    tenant: str,
    f: JobFilter | None = None,
    cursor: str | None = None,
    limit: int = 50,
    *,
    now: datetime | None = None,
) -> JobListPage:
    """`now`: the instant the last run is judged at (the database's clock by default)."""
    f = f or JobFilter()
    f.check()
    if not 1 <= limit <= MAX_PAGE:
        raise FieldError("limit", f"must be between 1 and {MAX_PAGE}")
    after = _cursor_decode(cursor) if cursor else None
    # a paused job's parked trigger by the fire it waits at (kit.store.jobs.NEXT_FIRE_SQL)
    next_fire_at = (
        select(
            func.coalesce(
                func.min(triggers.c.fire_at).filter(triggers.c.parked_fire_at.is_(None)),
                func.min(triggers.c.parked_fire_at),
            )
        )
        .where(triggers.c.job_id == jobs.c.job_id, triggers.c.kind == "schedule")
        .scalar_subquery()
        .label("next_fire_at")
    )
    page_query = _filtered(tenant, f, [jobs, next_fire_at], with_last_run=True, now=now)
    if after is not None:
        page_query = page_query.where(jobs.c.name > after)
    page_query = page_query.order_by(jobs.c.name).limit(limit + 1)
    count_query = _filtered(tenant, f, [jobs.c.job_id], with_last_run=False, now=now)
    counted = select(func.count()).select_from(count_query.limit(COUNT_CAP + 1).subquery())
    # Two statements without a transaction around them: under READ COMMITTED each sees
    # its own snapshot either way, and BEGIN and COMMIT would be two more round trips.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        rows = conn.execute(page_query).all()
        count = conn.execute(counted).scalar_one()
    out: list[tuple[JobRecord, LastRun | None]] = []
    for row in rows[:limit]:
        mapping = row._mapping
        last = None
        if mapping["status"] is not None:
            last = LastRun(str(mapping["run_id"]), mapping["status"], mapping["scheduled_at"])
        out.append((job_record(row), last))
    next_cursor = _cursor_encode(out[-1][0].spec.name) if len(rows) > limit else None
    return JobListPage(out, next_cursor, min(count, COUNT_CAP), count <= COUNT_CAP)


def job_names(engine: Engine, tenant: str, job_ids: list[str]) -> dict[str, str]:
    """Names of the tenant's jobs among `job_ids` (a deleted job has none)."""
    if not job_ids:
        return {}
    with engine.begin() as conn:
        rows = conn.execute(
            select(jobs.c.job_id, jobs.c.name).where(
                jobs.c.tenant == tenant, jobs.c.job_id.in_(sorted(set(job_ids)))
            )
        ).all()
    return {str(r.job_id): r.name for r in rows}
