"""A partial index for the runs held back by overlap 'queue'.

Every finish asks "does this job have a queued run?" (skip_reason = 'queued'). Without
an index of its own the planner may answer it from ix_runs_undispatched, reading every
undispatched run: during a 50,000-run burst that was 6 ms per question, 6 s per batch
of 1,000 finishes, on a table whose statistics were taken when it was quiet. Queued
runs are few, so this index is tiny, and it gives the release order directly.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_queued",
        "runs",
        ["job_id", "scheduled_at", "run_id"],
        postgresql_where=sa.text("skip_reason = 'queued'"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_queued", table_name="runs")
