"""Runs lose the 'dispatched' status, and their indexes follow the new life of a run.

A scheduler now publishes a run right after the scan commits it, a worker claims it ahead
of its second and starts it then (docs/life-of-a-run.md). Nothing records the publish:
that write was a row version per run, touching every index of `runs`, at the worst
moment of a burst. So a run is `pending` until claimed; the reaper finds lost messages
from the workers' progress (kit.core.recovery). Existing 'dispatched' runs are pending.

The indexes are cut to what each status needs, so a run's three row versions (insert,
claim, finish) touch fewer of them:
- the reaper's expired leases: `lease_expires_at` of running runs only (was status and
  expiry of every run);
- the reaper's unclaimed runs: pending runs by scheduled time (was: pending, never marked);
- the overlap check: busy runs of a job (kit.core.leases.BUSY, no 'dispatched').

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_OLD = (
    "status IN ('pending', 'dispatched', 'running', 'succeeded', 'retry_scheduled', "
    "'dead', 'skipped', 'cancelled')"
)
_NEW = (
    "status IN ('pending', 'running', 'succeeded', 'retry_scheduled', 'dead', "
    "'skipped', 'cancelled')"
)


def upgrade() -> None:
    op.execute("UPDATE runs SET status = 'pending' WHERE status = 'dispatched'")
    op.drop_constraint(op.f("ck_runs_status"), "runs", type_="check")
    op.create_check_constraint(op.f("ck_runs_status"), "runs", _NEW)
    op.drop_index("ix_runs_status_lease_expires_at", table_name="runs")
    op.create_index(
        "ix_runs_lease_expires_at",
        "runs",
        ["lease_expires_at"],
        postgresql_where=sa.text("status = 'running'"),
    )
    op.drop_index("ix_runs_undispatched", table_name="runs")
    op.create_index(
        "ix_runs_pending", "runs", ["scheduled_at"], postgresql_where=sa.text("status = 'pending'")
    )
    op.drop_index("ix_runs_busy_job_id", table_name="runs")
    op.create_index(
        "ix_runs_busy_job_id",
        "runs",
        ["job_id"],
        postgresql_where=sa.text("status IN ('pending', 'retry_scheduled', 'running')"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_busy_job_id", table_name="runs")
    op.create_index(
        "ix_runs_busy_job_id",
        "runs",
        ["job_id"],
        postgresql_where=sa.text(
            "status IN ('dispatched', 'pending', 'retry_scheduled', 'running')"
        ),
    )
    op.drop_index("ix_runs_pending", table_name="runs")
    op.create_index(
        "ix_runs_undispatched",
        "runs",
        ["scheduled_at"],
        postgresql_where=sa.text("status = 'pending' AND dispatched_at IS NULL"),
    )
    op.drop_index("ix_runs_lease_expires_at", table_name="runs")
    op.create_index("ix_runs_status_lease_expires_at", "runs", ["status", "lease_expires_at"])
    op.drop_constraint(op.f("ck_runs_status"), "runs", type_="check")
    op.create_check_constraint(op.f("ck_runs_status"), "runs", _OLD)
