"""What the database knows of a run waiting to start and of its tenant's load, for
explain and the run page (kit.core.waiting decides what to say). Read only when asked,
never by the workers."""

from __future__ import annotations

from sqlalchemy import Connection, text

from kit.core.trigger import QUEUED
from kit.core.waiting import TenantLoad
from kit.store.vocab import RUN_PENDING, RUN_RUNNING


def awaiting_sql(alias: str = "", now: str = "now()") -> str:
    """True when the run is due (its second or its retry time has come) and has not
    started: pending (not held back by the overlap policy 'queue', which explain says
    apart), or held by a worker that has recorded no start for its attempt."""
    a = f"{alias}." if alias else ""
    return (
        f"(greatest({a}scheduled_at, {a}retry_at) <= {now} AND ("
        f"({a}status = {RUN_PENDING} AND {a}skip_reason IS DISTINCT FROM '{QUEUED}')"
        f" OR ({a}status = {RUN_RUNNING} AND {a}attempt_started_at IS NULL)))"
    )


# A tenant's running runs are read through the partial index on running runs
# (ix_runs_lease_expires_at): as many rows as the fleet runs at once, whatever the
# history holds.
_LOAD = f"""
SELECT count(*) AS running,
    count(*) FILTER (WHERE attempt_started_at >= now() - :window_ms * interval '1 millisecond')
        AS recent
FROM runs
WHERE status = {RUN_RUNNING} AND tenant = :tenant AND attempt_started_at IS NOT NULL
"""


def tenant_load(conn: Connection, tenant: str, window_ms: int) -> TenantLoad:
    """The tenant's runs started (start recorded) and not ended, fleet-wide, and how many
    of them started within the last `window_ms`."""
    row = conn.execute(text(_LOAD), {"tenant": tenant, "window_ms": window_ms}).one()
    return TenantLoad(int(row.running), int(row.recent))
