"""Run states, attempt output and failure notifications.

- `runs.claimed_at`, `runs.attempt_started_at`: the current attempt's claim and start,
  from which a run held by a worker for its second is told from one that runs
  (kit.core.run_state); nullable, no default: adding them rewrites no row.
- `run_outputs`: each attempt's output excerpt (kit.core.output), capped in bytes by a
  CHECK as the writer caps it, expired by the maintenance service.
- `jobs.notify` and `notifications`: the webhook a job names for its dead letters and
  the outbox the maintenance service sends from (kit.core.notify).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_CAP = 4096  # kit.core.output.OUTPUT_CAP_BYTES when this was written


def _tstz(name: str, nullable: bool = True, now_default: bool = False) -> sa.Column:
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        nullable=nullable,
        server_default=sa.text("now()") if now_default else None,
    )


def upgrade() -> None:
    op.add_column("runs", _tstz("claimed_at"))
    op.add_column("runs", _tstz("attempt_started_at"))
    op.add_column("jobs", sa.Column("notify", JSONB(), nullable=True))
    op.create_table(
        "run_outputs",
        sa.Column("run_id", UUID(as_uuid=False), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        _tstz("finished_at", nullable=False, now_default=True),
        sa.Column("output", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("stderr", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.PrimaryKeyConstraint("run_id", "attempt", name=op.f("pk_run_outputs")),
        sa.CheckConstraint(
            f"octet_length(output) <= {_CAP}", name=op.f("ck_run_outputs_output_cap")
        ),
        sa.CheckConstraint(
            f"octet_length(stderr) <= {_CAP}", name=op.f("ck_run_outputs_stderr_cap")
        ),
    )
    op.create_index("ix_run_outputs_finished_at", "run_outputs", ["finished_at"])
    op.create_table(
        "notifications",
        sa.Column("notification_id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("job_id", UUID(as_uuid=False), nullable=False),
        sa.Column("job_name", sa.Text(), nullable=False),
        sa.Column("run_id", UUID(as_uuid=False), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        _tstz("scheduled_at", nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("target", JSONB(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False, server_default=sa.text("'pending'")),
        sa.Column("tries", sa.Integer(), nullable=False, server_default=sa.text("0")),
        _tstz("next_at", nullable=False, now_default=True),
        _tstz("sent_at"),
        sa.Column("last_error", sa.Text(), nullable=True),
        _tstz("created_at", nullable=False, now_default=True),
        sa.PrimaryKeyConstraint("notification_id", name=op.f("pk_notifications")),
        sa.UniqueConstraint("run_id", "attempt", name=op.f("uq_notifications_run_id_attempt")),
        sa.CheckConstraint(
            "status IN ('pending', 'sent', 'failed')", name=op.f("ck_notifications_status")
        ),
    )
    op.create_index(
        "ix_notifications_due",
        "notifications",
        ["next_at"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_notifications_finished",
        "notifications",
        ["created_at"],
        postgresql_where=sa.text("status IN ('sent', 'failed')"),
    )


def downgrade() -> None:
    op.drop_table("notifications")
    op.drop_table("run_outputs")
    op.drop_column("jobs", "notify")
    op.drop_column("runs", "attempt_started_at")
    op.drop_column("runs", "claimed_at")
