"""The overlap index covers every run that keeps its job busy, a retry awaited included.

A run waiting for its retry now counts for the overlap policy (kit.core.leases.BUSY), or
with forbid or queue the next fire ran and the retry then ran beside it. The scan asks
"is this job busy?" for every overlap job it fires, so the partial index follows the
new predicate.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_runs_active_job_id", table_name="runs")
    op.create_index(
        "ix_runs_busy_job_id",
        "runs",
        ["job_id"],
        postgresql_where=sa.text(
            "status IN ('dispatched', 'pending', 'retry_scheduled', 'running')"
        ),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_busy_job_id", table_name="runs")
    op.create_index(
        "ix_runs_active_job_id",
        "runs",
        ["job_id"],
        postgresql_where=sa.text("status IN ('pending', 'dispatched', 'running')"),
    )
