"""Each worker's per-tenant figures with its presence row (the operator's fleet view).

`workers.tenants`: per tenant label, runs started and times limited over the last
minute, runs waiting now for a share or at a limit, and the start lag p99 over the
last minute (kit.core.tenant_figures), as of the worker's last presence beat. A nullable
column without a default: adding it rewrites nothing; a worker of an older version
leaves it null.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "workers", sa.Column("tenants", postgresql.JSONB(astext_type=sa.Text()), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("workers", "tenants")
