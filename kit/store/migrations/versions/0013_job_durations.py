"""Each job keeps how long its runs take, and the run lease that follows (job durations).

`duration_p50_ms`, `duration_p99_ms`, `duration_samples`: over the job's most recent
first attempts that succeeded (kit.core.durations), refreshed by the workers that
finish its runs; `durations_at`: when. `lease_ttl_ms`: the lease its runs are claimed
with (1.5 x p99 within the operator's bounds; NULL: the fleet's default, until enough
runs were measured). Nullable columns without a default: adding them rewrites nothing.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

COLUMNS = ("duration_p50_ms", "duration_p99_ms", "duration_samples", "lease_ttl_ms")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("jobs", sa.Column(name, sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("durations_at", sa.DateTime(timezone=True), nullable=True))
    op.create_check_constraint(op.f("ck_jobs_lease_ttl_ms"), "jobs", "lease_ttl_ms > 0")


def downgrade() -> None:
    op.drop_constraint("ck_jobs_lease_ttl_ms", "jobs", type_="check")
    op.drop_column("jobs", "durations_at")
    for name in reversed(COLUMNS):
        op.drop_column("jobs", name)
