"""The task-queue API for outside, pull-based workers: one table of tasks per tenant and
queue name, with a partial index for the lease scan (visible tasks, oldest first).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_tasks",
        sa.Column("task_id", sa.UUID(as_uuid=False), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'queued'"), nullable=False),
        sa.Column("attempt", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("timeout_s", sa.Integer(), nullable=False),
        sa.Column("visible_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_token", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("worker_id", sa.Text(), nullable=True),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "errors",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("dead_reason", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("request_hash", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'leased', 'done', 'dead')", name=op.f("ck_queue_tasks_status")
        ),
        sa.CheckConstraint("attempt >= 0", name=op.f("ck_queue_tasks_attempt")),
        sa.CheckConstraint(
            "max_attempts BETWEEN 1 AND 100", name=op.f("ck_queue_tasks_max_attempts")
        ),
        sa.CheckConstraint("timeout_s BETWEEN 1 AND 86400", name=op.f("ck_queue_tasks_timeout_s")),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_queue_tasks")),
        sa.UniqueConstraint(
            "tenant", "idempotency_key", name=op.f("uq_queue_tasks_tenant_idempotency_key")
        ),
    )
    op.create_index(
        "ix_queue_tasks_visible",
        "queue_tasks",
        ["tenant", "queue", "visible_at"],
        unique=False,
        postgresql_where=sa.text("status IN ('queued', 'leased')"),
    )
    op.create_index(
        op.f("ix_queue_tasks_tenant_queue_status"),
        "queue_tasks",
        ["tenant", "queue", "status"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_queue_tasks_tenant_queue_status"), table_name="queue_tasks")
    op.drop_index("ix_queue_tasks_visible", table_name="queue_tasks")
    op.drop_table("queue_tasks")
