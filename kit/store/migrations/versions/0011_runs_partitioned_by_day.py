"""`runs` becomes a table partitioned by day, on ranges of the run id.

Run ids now carry their scheduled instant in their first 48 bits (kit.core.ids, version
8), so a range of ids is a range of scheduled time: one partition per UTC day, created
ahead and dropped after the retention by the kit's maintenance (kit/store/run_history.py),
and every lookup by id prunes to one partition.

The rows already there are re-keyed to the new layout (their dead letters follow), so
every place that names a run from its job and time (a retry's re-arm, explain, backfill,
run now with a key) finds the old runs too. What that costs, stated: a run id recorded
outside the kit before the upgrade no longer names its run, and a run in flight during
the upgrade (its message in Kafka, or a worker running it) is recovered under its new id
(the reaper publishes a pending run whose message is lost; a running one is re-queued
when its lease expires), so its task may see it twice under two keys. Upgrade with the
schedulers stopped and the workers drained to avoid that. The function that re-keys is
copied below, frozen, as this migration's own (a unit test holds it equal to
kit.core.ids.run_id while the layout stays).

Re-keyed rows go to the default partition; `cronfleet db upgrade` then makes the days
(kit.store.migrate.upgrade, from the maintenance's own code), moving yesterday's and
today's rows into theirs. Older rows age out of the default partition by the retention.
The copy is a rewrite of the table under this migration's lock.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import hashlib
import uuid

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_BUSY = "status IN ('pending', 'retry_scheduled', 'running')"

_INDEXES = (
    "CREATE INDEX ix_runs_job_id_scheduled_at ON runs (job_id, scheduled_at DESC, run_id DESC)",
    "CREATE INDEX ix_runs_lease_expires_at ON runs (lease_expires_at) WHERE status = 'running'",
    "CREATE INDEX ix_runs_pending ON runs (scheduled_at) WHERE status = 'pending'",
    f"CREATE INDEX ix_runs_busy_job_id ON runs (job_id) WHERE {_BUSY}",
    "CREATE INDEX ix_runs_queued ON runs (job_id, scheduled_at, run_id) "
    "WHERE skip_reason = 'queued'",
)


def _rename_indexes(table: str, suffix: str) -> None:
    op.execute(
        f"""
        DO $$
        DECLARE ix record;
        BEGIN
            FOR ix IN SELECT indexname FROM pg_indexes
                      WHERE schemaname = current_schema() AND tablename = '{table}'
            LOOP
                EXECUTE format('ALTER INDEX %I RENAME TO %I', ix.indexname,
                               ix.indexname || '{suffix}');
            END LOOP;
        END $$
        """
    )


_NAMESPACE = uuid.UUID("5b0f8a52-4c1e-4f59-9d0e-6c6e1b7f3a10")
_BATCH = 10_000


def run_id_v8(job_id: str, ms: int) -> str:
    """kit.core.ids.run_id as of this migration."""
    digest = hashlib.sha1(_NAMESPACE.bytes + f"{job_id}/{ms}".encode()).digest()
    tail = int.from_bytes(digest[:10], "big")
    value = (ms << 80) | (8 << 76) | ((tail >> 68) << 64) | (0b10 << 62) | (tail & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


def _rekey() -> None:
    """Map every old id to the new layout (computed here, in batches), then rewrite the
    ids of runs and dead letters from the map."""
    conn = op.get_bind()
    conn.execute(sa.text("CREATE TEMP TABLE run_rekey (old uuid PRIMARY KEY, new uuid NOT NULL)"))
    after = "00000000-0000-0000-0000-000000000000"
    while True:
        rows = conn.execute(
            sa.text(
                "SELECT run_id::text, job_id::text,"
                " floor(extract(epoch FROM scheduled_at) * 1000)::bigint AS ms"
                " FROM runs_unpartitioned WHERE run_id > CAST(:after AS uuid)"
                " ORDER BY run_id LIMIT :n"
            ),
            {"after": after, "n": _BATCH},
        ).all()
        if not rows:
            break
        conn.execute(
            sa.text(
                "INSERT INTO run_rekey SELECT * FROM unnest(CAST(:old AS uuid[]),"
                " CAST(:new AS uuid[]))"
            ),
            {"old": [r.run_id for r in rows], "new": [run_id_v8(r.job_id, r.ms) for r in rows]},
        )
        after = rows[-1].run_id
    conn.execute(
        sa.text(
            "UPDATE runs_unpartitioned r SET run_id = m.new FROM run_rekey m WHERE r.run_id = m.old"
        )
    )
    conn.execute(
        sa.text("UPDATE dead_letters d SET run_id = m.new FROM run_rekey m WHERE d.run_id = m.old")
    )
    conn.execute(sa.text("DROP TABLE run_rekey"))


def upgrade() -> None:
    op.execute("ALTER TABLE runs RENAME TO runs_unpartitioned")
    _rename_indexes("runs_unpartitioned", "_unpartitioned")
    op.execute(
        "CREATE TABLE runs (LIKE runs_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        " PARTITION BY RANGE (run_id)"
    )
    op.execute("ALTER TABLE runs ADD CONSTRAINT pk_runs PRIMARY KEY (run_id)")
    for ddl in _INDEXES:
        op.execute(ddl)
    op.execute("CREATE TABLE runs_default PARTITION OF runs DEFAULT")
    _rekey()
    op.execute("INSERT INTO runs SELECT * FROM runs_unpartitioned")
    op.execute("DROP TABLE runs_unpartitioned")


def downgrade() -> None:
    op.execute("ALTER TABLE runs RENAME TO runs_partitioned")
    _rename_indexes("runs_partitioned", "_partitioned")
    op.execute("CREATE TABLE runs (LIKE runs_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    op.execute("ALTER TABLE runs ADD CONSTRAINT pk_runs PRIMARY KEY (run_id)")
    for ddl in _INDEXES:
        op.execute(ddl)
    op.execute("INSERT INTO runs SELECT * FROM runs_partitioned")
    op.execute("DROP TABLE runs_partitioned CASCADE")
