"""The shard map's catalog row: which shard holds each of the trigger index's partitions.

`shard_map`: at most one row (id 1), the map in its plain form (kit.core.shard_map's
`mapping_of`) and its epoch, which a move's flip compares and bumps in one UPDATE so two
operators moving at once cannot both win. Read on the home shard only (every shard has
the same schema); no row means every partition on the home shard, which is what every
deployment has until partitions move (docs/shards.md).

A new table only: nothing existing is rewritten.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "shard_map",
        sa.Column("id", sa.SmallInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("map", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column(
            "written_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("id = 1", name=op.f("ck_shard_map_one_row")),
        sa.CheckConstraint("epoch >= 0", name=op.f("ck_shard_map_epoch")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shard_map")),
    )


def downgrade() -> None:
    op.drop_table("shard_map")
