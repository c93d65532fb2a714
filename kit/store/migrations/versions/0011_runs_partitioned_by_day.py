"""`runs` becomes a table partitioned by day, on ranges of the run id.

Run ids made from now on carry their scheduled instant in their first 48 bits
(kit.core.ids, version 8), so a range of ids is a range of scheduled time: one partition
per UTC day, created ahead and dropped after the retention by the kit's maintenance
(kit/store/run_history.py), and every lookup by id prunes to one partition.

The rows already there keep their ids (a tenant's recorded run ids still name the same
runs). Their version-5 ids carry no time, so they go to the default partition, which the
maintenance prunes as they age out. The copy is a rewrite of the table under this
migration's lock: stop the schedulers and workers for it on a large history (the
statement count is one INSERT ... SELECT; expect it to run at the speed of a bulk copy).

The days themselves are made after the migrations by `cronfleet db upgrade`
(kit.store.migrate.upgrade), from the same code the maintenance runs, so their bounds
cannot disagree with the id layout.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

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
