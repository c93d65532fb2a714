"""The operator's kill switches and their audit log.

`switches`: one row per switch that is off (a tenant, a task type or a priority tier
whose runs are not started fleet-wide, kit.core.switches); the claim and the reaper's
republish leave the runs it holds pending. `switch_audit`: every switch turned off or
on, by whom, why, and what the lift did to the held runs.

New tables only: nothing existing is rewritten.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "switches",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column(
            "since", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.CheckConstraint(
            "kind IN ('tenant', 'task_type', 'tier')", name=op.f("ck_switches_kind")
        ),
        sa.PrimaryKeyConstraint("kind", "value", name=op.f("pk_switches")),
    )
    op.create_table(
        "switch_audit",
        sa.Column("audit_id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("held", sa.Integer(), nullable=True),
        sa.Column("skipped", sa.Integer(), nullable=True),
        sa.CheckConstraint("action IN ('off', 'on')", name=op.f("ck_switch_audit_action")),
        sa.PrimaryKeyConstraint("audit_id", name=op.f("pk_switch_audit")),
    )
    op.create_index(op.f("ix_switch_audit_at"), "switch_audit", ["at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_switch_audit_at"), table_name="switch_audit")
    op.drop_table("switch_audit")
    op.drop_table("switches")
