"""Jobs' measured durations and sized run leases (kit.core.durations), from run history.

`job_durations_refresh` takes each job's most recent first attempts that succeeded
(start to finish), computes p50 and p99 and the lease they call for, and writes them on
the job, in one transaction for a batch of jobs. A worker calls it for the jobs whose
runs it finished lately (kit.worker.worker.Worker._refresh_durations): the history is
the source, so the figures survive a worker's restart and count every worker's runs.
Each job's runs are found by `ix_runs_job_id_scheduled_at`, newest first.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import Engine, text

from kit.core.durations import RECENT, Durations, LeaseBounds, durations_of, sized_lease_ms
from kit.store.db import NOW_SQL
from kit.store.scheduling import pg_array, pg_text_array
from kit.store.vocab import RUN_SUCCEEDED

_RECENT_DURATIONS = f"""
SELECT w.job_id::text AS job_id, array_agg(x.ms) AS ms
FROM unnest(CAST(:jobs AS uuid[])) AS w(job_id)
CROSS JOIN LATERAL (
    SELECT greatest(0, round(extract(epoch FROM r.finished_at - r.started_at) * 1000))::int
        AS ms
    FROM runs r
    WHERE r.job_id = w.job_id AND r.status = {RUN_SUCCEEDED} AND r.attempt = 1
      AND r.started_at IS NOT NULL AND r.finished_at IS NOT NULL
    ORDER BY r.scheduled_at DESC, r.run_id DESC
    LIMIT :recent
) AS x
GROUP BY w.job_id
"""

_WRITE = f"""
UPDATE jobs j SET duration_p50_ms = d.p50, duration_p99_ms = d.p99,
    duration_samples = d.n, lease_ttl_ms = d.lease, durations_at = {NOW_SQL}
FROM unnest(CAST(:jobs AS uuid[]), CAST(:p50 AS int[]), CAST(:p99 AS int[]),
            CAST(:n AS int[]), CAST(:lease AS int[])) AS d(job_id, p50, p99, n, lease)
WHERE j.job_id = d.job_id
"""


def job_durations_refresh(
    engine: Engine,
    job_ids: Collection[str],
    bounds: LeaseBounds,
    now: datetime | None = None,
) -> dict[str, tuple[Durations, int | None]]:
    """Measure and write the durations and sized lease of `job_ids` (those with at least
    one run measured); returns what was written, by job."""
    if not job_ids:
        return {}
    jobs = sorted(job_ids)
    out: dict[str, tuple[Durations, int | None]] = {}
    with engine.begin() as conn:
        rows = conn.execute(
            text(_RECENT_DURATIONS), {"jobs": pg_array(jobs), "recent": RECENT}
        ).all()
        for row in rows:
            measured = durations_of([int(ms) for ms in row.ms])
            if measured is not None:
                out[row.job_id] = (measured, sized_lease_ms(measured, bounds))
        if out:
            written = sorted(out)
            conn.execute(
                text(_WRITE),
                {
                    "jobs": pg_array(written),
                    "p50": pg_array(out[j][0].p50_ms for j in written),
                    "p99": pg_array(out[j][0].p99_ms for j in written),
                    "n": pg_array(out[j][0].samples for j in written),
                    "lease": pg_text_array(
                        None if out[j][1] is None else str(out[j][1]) for j in written
                    ),
                    "now": now,
                },
            )
    return out
