"""The life of a run: retry triggers name the run they retry, runs keep their error
history and retry time, jobs can pause themselves after repeated dead letters.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("pause_after_dead", sa.Integer(), nullable=True))
    op.add_column(
        "jobs", sa.Column("dead_streak", sa.Integer(), server_default=sa.text("0"), nullable=False)
    )
    op.add_column(
        "triggers", sa.Column("run_scheduled_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "runs",
        sa.Column(
            "errors",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )
    op.add_column("runs", sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "retry_at")
    op.drop_column("runs", "errors")
    op.drop_column("triggers", "run_scheduled_at")
    op.drop_column("jobs", "dead_streak")
    op.drop_column("jobs", "pause_after_dead")
