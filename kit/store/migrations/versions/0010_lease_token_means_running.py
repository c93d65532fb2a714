"""A run holds a lease token exactly while it is running.

Every path already cleared the token when a run left 'running'; the constraint makes it
the database's rule, so a statement that matches a run by its lease token needs no
`status = 'running'` beside it. That predicate was harmful, not only redundant: with
statistics taken when no run was running, it let the planner pick the partial index of
running runs (`ix_runs_lease_expires_at`, or the busy-runs index) and read all of it
for each run finished (tests/integration/test_plans_stale_stats.py). Tokens left on
finished runs by an older version are cleared first; the constraint is added NOT VALID
and validated after, so the scan of existing rows does not block writers.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_RULE = "(status = 'running') = (lease_token IS NOT NULL)"


def upgrade() -> None:
    op.execute(
        "UPDATE runs SET lease_token = NULL WHERE status <> 'running' AND lease_token IS NOT NULL"
    )
    op.execute(
        "UPDATE runs SET lease_token = gen_random_uuid()::text, "
        "lease_expires_at = coalesce(lease_expires_at, now()) "
        "WHERE status = 'running' AND lease_token IS NULL"
    )
    op.execute(f"ALTER TABLE runs ADD CONSTRAINT ck_runs_lease_token CHECK ({_RULE}) NOT VALID")
    op.execute("ALTER TABLE runs VALIDATE CONSTRAINT ck_runs_lease_token")


def downgrade() -> None:
    op.drop_constraint("ck_runs_lease_token", "runs", type_="check")
