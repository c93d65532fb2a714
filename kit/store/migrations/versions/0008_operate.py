"""Operating at scale: the jobs list, cancel, backfill, the job audit log, console
sessions, worker presence, and the indexes the maintenance service's expiry needs.

- `jobs`: `name` sorts by bytes (collation "C"), so the unique (tenant, name) index
  serves GET /v1/jobs in name order and a name prefix is a range of it whatever the
  database's default collation; one more index per filter (priority, task type, paused).
- `runs`: `cancelled_by` (the token that cancelled a run) and the run kind `backfill`.
  The kind's check is re-added NOT VALID and validated separately, so the long scan of
  a big table holds only a SHARE UPDATE EXCLUSIVE lock (writes go on).
- `job_audit`: one row per job change; a trigger records the pauses and resumes the
  kit makes itself (auto-pause after dead letters: the job's version does not change,
  which is how such an update is told from an edit, which always bumps it).
- `console_sessions`, `workers`.
- expiry indexes: idempotency keys by age, finished queue tasks by finish time, dead
  letters by age (not replayed) and by replay time, audit entries by age.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_TASK_TYPE = sa.literal_column("(task_spec ->> 'type')")

_AUDIT_KIT_PAUSE = """
CREATE FUNCTION job_audit_kit_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_audit (tenant, job_id, at, actor, action, version, changes)
    VALUES (NEW.tenant, NEW.job_id, now(), 'kit',
            CASE WHEN NEW.paused THEN 'auto_pause' ELSE 'resume' END, NEW.version,
            jsonb_build_object(
                'paused', jsonb_build_object('from', OLD.paused, 'to', NEW.paused),
                'dead_streak', NEW.dead_streak,
                'pause_after_dead', NEW.pause_after_dead));
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_audit_kit_pause AFTER UPDATE OF paused ON jobs
FOR EACH ROW WHEN (OLD.paused IS DISTINCT FROM NEW.paused AND OLD.version = NEW.version)
EXECUTE FUNCTION job_audit_kit_pause();
"""


def upgrade() -> None:
    # Rebuilds uq_jobs_tenant_name (no table rewrite): it then serves the name listing.
    op.alter_column("jobs", "name", type_=sa.Text(collation="C"), existing_nullable=False)
    op.create_index("ix_jobs_list_priority", "jobs", ["tenant", "priority", "name"])
    op.create_index("ix_jobs_list_task_type", "jobs", ["tenant", _TASK_TYPE, "name"])
    op.create_index(
        "ix_jobs_list_paused", "jobs", ["tenant", "name"], postgresql_where=sa.text("paused")
    )

    op.add_column("runs", sa.Column("cancelled_by", sa.Text(), nullable=True))
    op.execute("ALTER TABLE runs DROP CONSTRAINT ck_runs_trigger_kind")
    op.execute(
        "ALTER TABLE runs ADD CONSTRAINT ck_runs_trigger_kind CHECK "
        "(trigger_kind IN ('schedule', 'retry', 'manual', 'backfill')) NOT VALID"
    )
    op.execute("ALTER TABLE runs VALIDATE CONSTRAINT ck_runs_trigger_kind")

    op.create_table(
        "job_audit",
        sa.Column("audit_id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("job_id", sa.UUID(as_uuid=False), nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column(
            "changes",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("snapshot", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.CheckConstraint(
            "action IN ('create', 'update', 'pause', 'resume', 'delete', 'run_now', "
            "'backfill', 'cancel_run', 'auto_pause')",
            name=op.f("ck_job_audit_action"),
        ),
        sa.PrimaryKeyConstraint("audit_id", name=op.f("pk_job_audit")),
    )
    op.create_index(op.f("ix_job_audit_job_id_audit_id"), "job_audit", ["job_id", "audit_id"])
    op.create_index(op.f("ix_job_audit_at"), "job_audit", ["at"])
    op.execute(_AUDIT_KIT_PAUSE)

    op.create_table(
        "console_sessions",
        sa.Column("session_hash", sa.Text(), nullable=False),
        sa.Column("token_id", sa.Text(), nullable=False),
        sa.Column("csrf_token", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.token_id"],
            name=op.f("fk_console_sessions_token_id_api_tokens"),
        ),
        sa.PrimaryKeyConstraint("session_hash", name=op.f("pk_console_sessions")),
    )
    op.create_index(op.f("ix_console_sessions_expires_at"), "console_sessions", ["expires_at"])

    op.create_table(
        "workers",
        sa.Column("worker_id", sa.Text(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("in_flight", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("pk_workers")),
    )

    op.create_index(op.f("ix_idempotency_keys_created_at"), "idempotency_keys", ["created_at"])
    op.create_index(
        "ix_queue_tasks_finished",
        "queue_tasks",
        ["finished_at"],
        postgresql_where=sa.text("status IN ('done', 'dead')"),
    )
    op.create_index(
        "ix_dead_letters_expiry",
        "dead_letters",
        ["created_at"],
        postgresql_where=sa.text("replayed_at IS NULL"),
    )
    op.create_index(
        "ix_dead_letters_replayed_expiry",
        "dead_letters",
        ["replayed_at"],
        postgresql_where=sa.text("replayed_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_dead_letters_replayed_expiry", table_name="dead_letters")
    op.drop_index("ix_dead_letters_expiry", table_name="dead_letters")
    op.drop_index("ix_queue_tasks_finished", table_name="queue_tasks")
    op.drop_index(op.f("ix_idempotency_keys_created_at"), table_name="idempotency_keys")
    op.drop_table("workers")
    op.drop_index(op.f("ix_console_sessions_expires_at"), table_name="console_sessions")
    op.drop_table("console_sessions")
    op.execute("DROP TRIGGER jobs_audit_kit_pause ON jobs")
    op.execute("DROP FUNCTION job_audit_kit_pause()")
    op.drop_index(op.f("ix_job_audit_at"), table_name="job_audit")
    op.drop_index(op.f("ix_job_audit_job_id_audit_id"), table_name="job_audit")
    op.drop_table("job_audit")
    op.execute("ALTER TABLE runs DROP CONSTRAINT ck_runs_trigger_kind")
    op.execute(
        "ALTER TABLE runs ADD CONSTRAINT ck_runs_trigger_kind "
        "CHECK (trigger_kind IN ('schedule', 'retry', 'manual'))"
    )
    op.drop_column("runs", "cancelled_by")
    op.drop_index("ix_jobs_list_paused", table_name="jobs")
    op.drop_index("ix_jobs_list_task_type", table_name="jobs")
    op.drop_index("ix_jobs_list_priority", table_name="jobs")
    op.alter_column("jobs", "name", type_=sa.Text(), existing_nullable=False)
