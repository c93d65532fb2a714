"""A paused job's schedule trigger waits for its resume instead of firing skipped runs;
a trigger says whether its job limits overlap.

Each fire of a paused job wrote a skipped run and moved its trigger on (200 paused
every-second jobs wrote 1.94 million rows in 40 minutes). Now the scan parks the
trigger the first time it comes due: `fire_at` becomes 'infinity' (no scan's range
reaches it) and `parked_fire_at` keeps the fire it owed; a resume puts it back where
the job's misfire policy wants the owed fires taken up (kit.core.trigger.
trigger_after_resume).

`limits_overlap`: the job (at the trigger's version) forbids, queues or replaces
overlapping runs, so the scan leaves its schedule trigger until a second before its
fire (kit.core.trigger.held_back). With it on the row, the due query holds such a
trigger back without looking its job up: in a scan-ahead of 10 s each one was read, and
its job looked up, about ten times before it was taken. NULL (a trigger written before
this migration, until the scan moves it): the job is looked up as before.

Nullable columns without a default: no table rewrite.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

PARKED = "parked_fire_at IS NULL OR (kind = 'schedule' AND fire_at = 'infinity')"


def upgrade() -> None:
    op.add_column("triggers", sa.Column("parked_fire_at", sa.DateTime(timezone=True)))
    op.add_column("triggers", sa.Column("limits_overlap", sa.Boolean()))
    op.create_check_constraint(op.f("ck_triggers_parked"), "triggers", PARKED)


def downgrade() -> None:
    # a parked trigger goes back to the fire it owed (that run is then skipped 'paused')
    op.execute(
        "UPDATE triggers SET fire_at = parked_fire_at, parked_fire_at = NULL"
        " WHERE parked_fire_at IS NOT NULL"
    )
    op.drop_constraint(op.f("ck_triggers_parked"), "triggers", type_="check")
    op.drop_column("triggers", "limits_overlap")
    op.drop_column("triggers", "parked_fire_at")
