"""A trigger's key names its kind: (partition_id, fire_at, job_id, kind).

A job's schedule trigger and a retry trigger of one of its runs used to share the key
(partition, fire_at, job). When the next schedule slot held a retry, the scan slid the
retry by 1 ms; if another retry of the job held that millisecond, the unique key aborted
the node's whole scan transaction, every second, and none of its partitions fired again.
With the kind in the key the two kinds never meet, and nothing has to slide. The prefix
(partition_id, fire_at) that the due scan reads is unchanged.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_constraint("pk_triggers", "triggers", type_="primary")
    op.create_primary_key("pk_triggers", "triggers", ["partition_id", "fire_at", "job_id", "kind"])


def downgrade() -> None:
    op.drop_constraint("pk_triggers", "triggers", type_="primary")
    op.create_primary_key("pk_triggers", "triggers", ["partition_id", "fire_at", "job_id"])
