"""The job audit log: written in the transaction of the change it records, read per job.

`actor` is who made the change: the caller's token id for the API and console, 'kit'
for what the kit does by itself (the auto-pause trigger of migration 0008). The diff
and the snapshot come from kit.core.audit, which keeps task header and env values out.
The snapshot's schedule and jitter are what explain reads to know which schedule was
in force when (`schedule_eras`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, select

from kit.core.audit import redacted, shown_changes
from kit.core.errors import FieldError
from kit.core.jitter import jitter_offset_ms
from kit.core.owed import ScheduleEra
from kit.core.schedule import parse_schedule, schedule_to_dict
from kit.store.db import is_uuid
from kit.store.errors import JobNotFound
from kit.store.schema import job_audit, jobs

MAX_PAGE = 500
KIT_ACTOR = "kit"


def job_view(spec: Any) -> dict[str, Any]:
    """A JobSpec as the API shows its client-settable fields (the audit compares these)."""
    return {
        "name": spec.name,
        "schedule": schedule_to_dict(spec.schedule),
        "task": dict(spec.task),
        "retry": dict(spec.retry),
        "timeout_s": spec.timeout_s,
        "overlap": spec.overlap,
        "misfire": dict(spec.misfire),
        "priority": spec.priority,
        "jitter_s": spec.jitter_s,
        "paused": spec.paused,
        "pause_after_dead": spec.pause_after_dead,
        "notify": None if getattr(spec, "notify", None) is None else dict(spec.notify),
    }


def audit_in(
    conn: Connection,
    *,
    tenant: str,
    job_id: str,
    actor: str,
    action: str,
    at: datetime,
    version: int | None = None,
    changes: Mapping[str, Any] | None = None,
    snapshot: Mapping[str, Any] | None = None,
) -> None:
    conn.execute(
        job_audit.insert().values(
            tenant=tenant,
            job_id=job_id,
            actor=actor,
            action=action,
            at=at,
            version=version,
            changes=dict(changes or {}),
            snapshot=redacted(snapshot) if snapshot is not None else None,
        )
    )


@dataclass(frozen=True)
class AuditEntry:
    audit_id: int
    job_id: str
    at: datetime
    actor: str
    action: str
    version: int | None
    changes: dict[str, Any]


@dataclass(frozen=True)
class AuditPage:
    entries: list[AuditEntry]
    next_cursor: str | None


def _cursor_encode(audit_id: int) -> str:
    return base64.urlsafe_b64encode(f"a:{audit_id}".encode()).decode().rstrip("=")


def _cursor_decode(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, number = raw.partition(":")
        audit_id = int(number)
        if kind != "a" or not 0 < audit_id < 2**63:
            raise ValueError(raw)
        return audit_id
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise FieldError("cursor", "is not a cursor returned by this API") from exc


def audit_list(
    engine: Engine, tenant: str, job_id: str, cursor: str | None = None, limit: int = 50
) -> AuditPage:
    """A job's audit entries, newest first. A deleted job's entries stay readable; a job
    this tenant never had is not found."""
    if not 1 <= limit <= MAX_PAGE:
        raise FieldError("limit", f"must be between 1 and {MAX_PAGE}")
    before = _cursor_decode(cursor) if cursor else None
    if not is_uuid(job_id):
        raise JobNotFound(job_id)
    query = (
        select(job_audit)
        .where(job_audit.c.tenant == tenant, job_audit.c.job_id == job_id)
        .order_by(job_audit.c.audit_id.desc())
        .limit(limit + 1)
    )
    if before is not None:
        query = query.where(job_audit.c.audit_id < before)
    with engine.begin() as conn:
        rows = conn.execute(query).all()
        if not rows and before is None:
            exists = conn.execute(
                select(jobs.c.job_id).where(jobs.c.tenant == tenant, jobs.c.job_id == job_id)
            ).first()
            if exists is None:
                raise JobNotFound(job_id)
    entries = [
        AuditEntry(
            audit_id=row.audit_id,
            job_id=str(row.job_id),
            at=row.at,
            actor=row.actor,
            action=row.action,
            version=row.version,
            changes=shown_changes(row.changes),
        )
        for row in rows[:limit]
    ]
    more = len(rows) > limit
    return AuditPage(entries, _cursor_encode(entries[-1].audit_id) if more else None)


def schedule_eras(
    conn: Connection, job_id: str, current: Any, created_at: datetime
) -> tuple[list[ScheduleEra], bool]:
    """The job's schedules in force over time, from its audit snapshots: one era per
    create or edit that set a schedule or jitter different from the one before.
    Returns (eras, complete): without a create entry (a job created in bulk, or before
    the audit log existed) the current schedule is taken as in force since creation."""
    rows = conn.execute(
        select(job_audit.c.action, job_audit.c.at, job_audit.c.version, job_audit.c.snapshot)
        .where(
            job_audit.c.job_id == job_id,
            job_audit.c.action.in_(("create", "update")),
            job_audit.c.snapshot.is_not(None),
        )
        .order_by(job_audit.c.audit_id)
    ).all()
    eras: list[ScheduleEra] = []
    last: tuple[Any, int] | None = None
    complete = bool(rows) and rows[0].action == "create"
    if not complete:
        rows = []
    for row in rows:
        snap = row.snapshot
        key = (snap["schedule"], snap.get("jitter_s", 0))
        if key == last:
            continue
        last = key
        schedule = parse_schedule(snap["schedule"], now=row.at)
        eras.append(
            ScheduleEra(
                schedule=schedule,
                since=row.at,
                jitter_offset_ms=jitter_offset_ms(job_id, int(snap.get("jitter_s", 0)) * 1000),
                version=row.version,
            )
        )
    if not eras:
        eras.append(
            ScheduleEra(
                schedule=current.schedule,
                since=created_at,
                jitter_offset_ms=jitter_offset_ms(job_id, current.jitter_s * 1000),
            )
        )
    return eras, complete
