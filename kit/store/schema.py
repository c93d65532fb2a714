"""The tables of the kit, as one SQLAlchemy Core MetaData.

The Alembic migrations in `migrations/versions` are the reviewed history of this file;
a test migrates a fresh database and checks that it equals this MetaData.

Conventions: every instant is `timestamptz`; ids are UUIDs handled as strings; policy
objects (schedule, task, retry, misfire) are `jsonb` in the shape the core's
`to_dict()`/`schedule_to_dict()` produce, so the scheduler can parse them back.
`triggers.fire_at` is when the trigger should fire: the nominal fire time plus the job's
deterministic jitter offset (`kit.core.jitter.jitter_offset_ms(job_id, jitter_s*1000)`).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

from kit.core.audit import AuditAction
from kit.core.dispatch import PriorityTier
from kit.core.leases import RunStatus
from kit.core.notify import NotificationStatus
from kit.core.output import OUTPUT_CAP_BYTES
from kit.core.policies import OverlapPolicy
from kit.core.queue_task import TaskStatus
from kit.core.switches import SwitchAction, SwitchKind
from kit.core.trigger import QUEUED, TRIGGER_ROW_KINDS, TriggerKind
from kit.store.vocab import (
    BUSY_SQL,
    FINISHED_NOTIFICATIONS_SQL,
    FINISHED_TASKS_SQL,
    KIND_SCHEDULE,
    LEASABLE_SQL,
    NOTIFICATION_PENDING,
    RUN_PENDING,
    RUN_RUNNING,
    TASK_QUEUED,
)

# Deterministic constraint names, so migrations and autogenerate agree.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# The closed sets of the columns below come from the core (kit.core.vocabulary indexes
# them); tests hold these CHECK constraints, and the migrated database's, equal to it.
TRIGGER_KINDS = tuple(k.value for k in TRIGGER_ROW_KINDS)
# A run may also come from a backfill (POST /v1/jobs/{id}:backfill); no trigger does.
RUN_TRIGGER_KINDS = tuple(k.value for k in TriggerKind)
RUN_STATUSES = tuple(s.value for s in RunStatus)
OVERLAP_POLICIES = tuple(p.value for p in OverlapPolicy)
PRIORITY_TIERS = tuple(t.value for t in PriorityTier)


def _tstz(name: str, nullable: bool = True, now_default: bool = False) -> Column:
    return Column(
        name,
        DateTime(timezone=True),
        nullable=nullable,
        server_default=text("now()") if now_default else None,
    )


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


tenants = Table(
    "tenants",
    metadata,
    Column("tenant", Text, primary_key=True),
    _tstz("created_at", nullable=False, now_default=True),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("token_id", Text, primary_key=True),
    Column("tenant", Text, ForeignKey("tenants.tenant"), nullable=False),
    Column("scopes", ARRAY(Text), nullable=False),
    # sha256 hex of the secret part; the secret itself is never stored.
    Column("secret_hash", Text, nullable=False),
    _tstz("created_at", nullable=False, now_default=True),
    _tstz("revoked_at"),
    Index(None, "tenant"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("job_id", UUID(as_uuid=False), primary_key=True),
    Column("tenant", Text, ForeignKey("tenants.tenant"), nullable=False),
    Column("name", Text(collation="C"), nullable=False),
    Column("schedule", JSONB, nullable=False),
    Column("timezone", Text, nullable=False),
    Column("task_spec", JSONB, nullable=False),
    Column("retry_policy", JSONB, nullable=False),
    Column("timeout_s", Integer, nullable=False),
    Column("overlap", Text, nullable=False),
    Column("misfire", JSONB, nullable=False),
    Column("priority", Text, nullable=False),
    Column("jitter_s", Integer, nullable=False, server_default=text("0")),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("version", Integer, nullable=False, server_default=text("1")),
    # Auto-pause: after this many consecutive dead-lettered runs (NULL: never).
    Column("pause_after_dead", Integer),
    Column("dead_streak", Integer, nullable=False, server_default=text("0")),
    # A webhook told of each dead letter (kit.core.notify): {"url", "headers",
    # "secret_headers"}; NULL: nobody is told.
    Column("notify", JSONB),
    _tstz("created_at", nullable=False, now_default=True),
    _tstz("updated_at", nullable=False, now_default=True),
    # How long its runs take (kit.core.durations) and the lease they are claimed with
    # (NULL: the fleet's default): migration 0012.
    Column("duration_p50_ms", Integer),
    Column("duration_p99_ms", Integer),
    Column("duration_samples", Integer),
    Column("lease_ttl_ms", Integer),
    _tstz("durations_at"),
    UniqueConstraint("tenant", "name"),
    # GET /v1/jobs lists a tenant's jobs in name order: `name` sorts by bytes (collation
    # "C"), so the unique index above serves the listing and a name prefix is a range of
    # it whatever the database's default collation. One index per other filter.
    Index("ix_jobs_list_priority", "tenant", "priority", "name"),
    Index("ix_jobs_list_task_type", "tenant", text("(task_spec ->> 'type')"), "name"),
    Index("ix_jobs_list_paused", "tenant", "name", postgresql_where=text("paused")),
    CheckConstraint(_in("overlap", OVERLAP_POLICIES), name="overlap"),
    CheckConstraint(_in("priority", PRIORITY_TIERS), name="priority"),
    CheckConstraint("timeout_s BETWEEN 1 AND 86400", name="timeout_s"),
    CheckConstraint("jitter_s BETWEEN 0 AND 3600", name="jitter_s"),
    CheckConstraint("version >= 1", name="version"),
    CheckConstraint("lease_ttl_ms > 0", name="lease_ttl_ms"),
)

# The trigger index: one scheduler node scans its partitions with
# `partition_id = ANY(...) AND fire_at <= ` the end of its scan-ahead window, which this
# primary key serves.
# Migration 0004 sets its autovacuum storage parameters (every advance is a new row
# version; see there), which MetaData does not carry.
triggers = Table(
    "triggers",
    metadata,
    Column("partition_id", SmallInteger, nullable=False),
    _tstz("fire_at", nullable=False),
    Column("job_id", UUID(as_uuid=False), nullable=False),
    Column("job_version", Integer, nullable=False),
    Column("kind", Text, nullable=False, server_default=text(KIND_SCHEDULE)),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    # For a retry trigger: the scheduled time of the run it retries (its run id).
    _tstz("run_scheduled_at"),
    # A paused job's schedule trigger, parked by the scan: the fire it owed, kept until a
    # resume puts it back (fire_at is 'infinity' meanwhile: no scan reaches it;
    # migration 0014).
    _tstz("parked_fire_at"),
    # The job (at job_version) limits overlap: a schedule trigger the scan holds back
    # until a second before its fire (kit.core.trigger.held_back) without a look at the
    # job. NULL: written before migration 0014 (the scan looks the job up).
    Column("limits_overlap", Boolean),
    # kind is in the key: a schedule trigger and a retry trigger of the job may share an
    # instant (migration 0006).
    PrimaryKeyConstraint("partition_id", "fire_at", "job_id", "kind"),
    CheckConstraint(_in("kind", TRIGGER_KINDS), name="kind"),
    CheckConstraint(
        f"parked_fire_at IS NULL OR (kind = {KIND_SCHEDULE} AND fire_at = 'infinity')",
        name="parked",
    ),
    Index(None, "job_id"),
)

# No foreign key to jobs: run history outlives a deleted job. Partitioned by day on
# ranges of the run id, whose first 48 bits are the scheduled instant (kit.core.ids;
# the days are kit/store/run_history.py's, migration 0011).
runs = Table(
    "runs",
    metadata,
    Column("run_id", UUID(as_uuid=False), primary_key=True),
    Column("job_id", UUID(as_uuid=False), nullable=False),
    Column("tenant", Text, nullable=False),
    Column("job_version", Integer, nullable=False),
    Column("priority", Text, nullable=False, server_default=text("'normal'")),
    _tstz("scheduled_at", nullable=False),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    Column("status", Text, nullable=False, server_default=text(RUN_PENDING)),
    Column("trigger_kind", Text, nullable=False),
    Column("lease_token", Text),
    _tstz("lease_expires_at"),
    Column("worker_id", Text),
    _tstz("dispatched_at"),
    # The first attempt's start (start lag is measured on it).
    _tstz("started_at"),
    _tstz("finished_at"),
    Column("error", Text),
    # One entry per failed attempt: {"attempt", "error", "finished_at", and since
    # migration 0012 "claimed_at", "started_at", "worker_id", "due_at" of that attempt}.
    Column("errors", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    # When the current attempt may start, for a retry (kept through its claim: a run
    # held for its retry's second is `claimed`, kit.core.run_state).
    _tstz("retry_at"),
    Column("skip_reason", Text),
    _tstz("created_at", nullable=False, now_default=True),
    # POST /v1/runs/{id}:cancel: the token that cancelled the run.
    Column("cancelled_by", Text),
    # The current attempt's claim (database clock) and start (the worker's, written
    # with its next heartbeat or its finish): kit.core.run_state tells `claimed` from
    # `running` with them.
    _tstz("claimed_at"),
    _tstz("attempt_started_at"),
    CheckConstraint(_in("status", RUN_STATUSES), name="status"),
    CheckConstraint(_in("trigger_kind", RUN_TRIGGER_KINDS), name="trigger_kind"),
    CheckConstraint("attempt >= 1", name="attempt"),
    # A token is the lease: held exactly while running (migration 0010), so matching it
    # proves the run is running and no statement repeats the status.
    CheckConstraint(f"(status = {RUN_RUNNING}) = (lease_token IS NOT NULL)", name="lease_token"),
    # Run history of a job, newest first, keyset-paginated on (scheduled_at, run_id).
    Index("ix_runs_job_id_scheduled_at", "job_id", text("scheduled_at DESC"), text("run_id DESC")),
    # The reaper: expired leases (running runs only: a run's insert and finish skip it).
    Index(
        "ix_runs_lease_expires_at",
        "lease_expires_at",
        postgresql_where=text(f"status = {RUN_RUNNING}"),
    ),
    # The reaper: runs not claimed yet, oldest first (lost messages, manual runs).
    Index("ix_runs_pending", "scheduled_at", postgresql_where=text(f"status = {RUN_PENDING}")),
    # The overlap policy: is this job busy (kit.core.leases.BUSY; migration 0007)?
    Index(
        "ix_runs_busy_job_id",
        "job_id",
        postgresql_where=text(f"status IN {BUSY_SQL}"),
    ),
    # Overlap 'queue': a job's runs held back, oldest first (released on each finish, in
    # kit.core.policies.queue_order).
    Index(
        "ix_runs_queued",
        "job_id",
        "scheduled_at",
        "run_id",
        postgresql_where=text(f"skip_reason = '{QUEUED}'"),
    ),
    postgresql_partition_by="RANGE (run_id)",
)

# What each attempt printed or was answered (kit.core.output: excerpts, capped and
# scrubbed), kept under its own retention (CRONFLEET_RUN_OUTPUT_RETENTION_S): written
# in the finish's transaction, only when there is something to keep.
run_outputs = Table(
    "run_outputs",
    metadata,
    Column("run_id", UUID(as_uuid=False), nullable=False),
    Column("attempt", Integer, nullable=False),
    _tstz("finished_at", nullable=False, now_default=True),
    Column("output", Text, nullable=False, server_default=text("''")),
    Column("stderr", Text, nullable=False, server_default=text("''")),
    PrimaryKeyConstraint("run_id", "attempt"),
    CheckConstraint(f"octet_length(output) <= {OUTPUT_CAP_BYTES}", name="output_cap"),
    CheckConstraint(f"octet_length(stderr) <= {OUTPUT_CAP_BYTES}", name="stderr_cap"),
    Index(None, "finished_at"),  # maintenance: outputs past their retention
)

partition_leases = Table(
    "partition_leases",
    metadata,
    Column("partition_id", SmallInteger, primary_key=True, autoincrement=False),
    Column("owner", Text),
    # The fencing token: bumped whenever ownership changes hands.
    Column("epoch", BigInteger, nullable=False, server_default=text("0")),
    _tstz("expires_at", nullable=False),
)

scheduler_nodes = Table(
    "scheduler_nodes",
    metadata,
    Column("node_id", Text, primary_key=True),
    _tstz("heartbeat_at", nullable=False),
    _tstz("started_at", nullable=False, now_default=True),
)

dead_letters = Table(
    "dead_letters",
    metadata,
    Column("run_id", UUID(as_uuid=False), primary_key=True),
    Column("job_id", UUID(as_uuid=False), nullable=False),
    Column("tenant", Text, nullable=False),
    # One entry per failed attempt: {"attempt", "error", "finished_at"}.
    Column("errors", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    _tstz("created_at", nullable=False, now_default=True),
    _tstz("replayed_at"),
    Index(None, "tenant", "created_at"),
    # Maintenance: dead letters past their retention, not replayed / replayed.
    Index("ix_dead_letters_expiry", "created_at", postgresql_where=text("replayed_at IS NULL")),
    Index(
        "ix_dead_letters_replayed_expiry",
        "replayed_at",
        postgresql_where=text("replayed_at IS NOT NULL"),
    ),
)

# The outbox of failure notifications (kit.core.notify): one row per dead letter of a
# job that names a webhook, written in the dead letter's transaction and sent by the
# maintenance service (kit.maintenance.notifier). The webhook is copied from the job
# when the run dies, so an edit later does not redirect what was already owed.
NOTIFICATION_STATUSES = tuple(s.value for s in NotificationStatus)

notifications = Table(
    "notifications",
    metadata,
    Column("notification_id", BigInteger, primary_key=True, autoincrement=True),
    Column("tenant", Text, nullable=False),
    Column("job_id", UUID(as_uuid=False), nullable=False),
    Column("job_name", Text, nullable=False),
    Column("run_id", UUID(as_uuid=False), nullable=False),
    Column("attempt", Integer, nullable=False),
    _tstz("scheduled_at", nullable=False),
    Column("error", Text),
    Column("target", JSONB, nullable=False),  # the job's `notify` when the run died
    Column("status", Text, nullable=False, server_default=text(NOTIFICATION_PENDING)),
    Column("tries", Integer, nullable=False, server_default=text("0")),
    _tstz("next_at", nullable=False, now_default=True),
    _tstz("sent_at"),
    Column("last_error", Text),
    _tstz("created_at", nullable=False, now_default=True),
    UniqueConstraint("run_id", "attempt"),  # once per dead letter
    CheckConstraint(_in("status", NOTIFICATION_STATUSES), name="status"),
    # The sender: pending ones, due first.
    Index(
        "ix_notifications_due", "next_at", postgresql_where=text(f"status = {NOTIFICATION_PENDING}")
    ),
    # Maintenance: finished ones past their retention.
    Index(
        "ix_notifications_finished",
        "created_at",
        postgresql_where=text(f"status IN {FINISHED_NOTIFICATIONS_SQL}"),
    ),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("key", Text, nullable=False),
    # sha256 hex of the canonical JSON request body: same key + other body -> 409.
    Column("request_hash", Text, nullable=False),
    Column("job_id", UUID(as_uuid=False), nullable=False),
    _tstz("created_at", nullable=False, now_default=True),
    PrimaryKeyConstraint("tenant", "key"),
    Index(None, "created_at"),  # maintenance: keys past their retention
)

# The task-queue API for outside, pull-based workers (kit.core.queue_task). A queue is a
# name within a tenant, created by its first task. `visible_at` is when a lease may take
# the task: the delay or nack backoff while queued, the lease expiry while leased, so one
# partial index serves the lease scan ("visible tasks, oldest first") for both.
QUEUE_TASK_STATUSES = tuple(s.value for s in TaskStatus)
FINISHED_TASKS = f"status IN {FINISHED_TASKS_SQL}"
LEASABLE_TASKS = f"status IN {LEASABLE_SQL}"

queue_tasks = Table(
    "queue_tasks",
    metadata,
    Column("task_id", UUID(as_uuid=False), primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("status", Text, nullable=False, server_default=text(TASK_QUEUED)),
    # Leases granted so far; the first lease is attempt 1.
    Column("attempt", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("timeout_s", Integer, nullable=False),
    _tstz("visible_at", nullable=False),
    Column("lease_token", Text),
    _tstz("lease_expires_at"),
    # The current attempt may not be held past this (leased_at + timeout_s).
    _tstz("deadline_at"),
    Column("worker_id", Text),
    Column("result", JSONB),
    # One entry per failed attempt: {"attempt", "error", "at"}.
    Column("errors", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("dead_reason", Text),
    Column("idempotency_key", Text),
    # sha256 hex of the canonical JSON of (queue, body): same key + other request -> 409.
    Column("request_hash", Text),
    _tstz("created_at", nullable=False, now_default=True),
    _tstz("finished_at"),
    # NULL keys are distinct, so only keyed tasks are deduplicated.
    UniqueConstraint("tenant", "idempotency_key"),
    CheckConstraint(_in("status", QUEUE_TASK_STATUSES), name="status"),
    CheckConstraint("attempt >= 0", name="attempt"),
    CheckConstraint("max_attempts BETWEEN 1 AND 100", name="max_attempts"),
    CheckConstraint("timeout_s BETWEEN 1 AND 86400", name="timeout_s"),
    # The lease scan: visible tasks of one queue, oldest first.
    Index(
        "ix_queue_tasks_visible",
        "tenant",
        "queue",
        "visible_at",
        postgresql_where=text(LEASABLE_TASKS),
    ),
    # Stats: counts per status of one queue.
    Index(None, "tenant", "queue", "status"),
    # Maintenance: finished tasks past their retention (queued or leased ones never expire).
    Index("ix_queue_tasks_finished", "finished_at", postgresql_where=text(FINISHED_TASKS)),
)

# Who changed a job, when, and what: one row per change made through the API (the
# store writes it in the change's own transaction, `actor` the caller's token id), and
# one per pause or resume the kit made itself (a database trigger, actor 'kit'). Task
# header and env values are never stored (kit.core.audit redacts them). `snapshot` is
# the job after the change (redacted): explain reads the schedule in force from it.
AUDIT_ACTIONS = tuple(a.value for a in AuditAction)

job_audit = Table(
    "job_audit",
    metadata,
    Column("audit_id", BigInteger, primary_key=True, autoincrement=True),
    Column("tenant", Text, nullable=False),
    Column("job_id", UUID(as_uuid=False), nullable=False),
    _tstz("at", nullable=False, now_default=True),
    Column("actor", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("version", Integer),
    Column("changes", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("snapshot", JSONB),
    CheckConstraint(_in("action", AUDIT_ACTIONS), name="action"),
    Index(None, "job_id", "audit_id"),
    Index(None, "at"),  # maintenance: entries past their retention
)

# Console logins: a session names the token it was opened with, so revoking the token
# ends its sessions too. Only sha256 of the session secret is stored.
console_sessions = Table(
    "console_sessions",
    metadata,
    Column("session_hash", Text, primary_key=True),
    Column("token_id", Text, ForeignKey("api_tokens.token_id"), nullable=False),
    Column("csrf_token", Text, nullable=False),
    _tstz("created_at", nullable=False, now_default=True),
    _tstz("expires_at", nullable=False),
    Index(None, "expires_at"),
)

# Worker presence for the fleet view: each worker upserts its row every few seconds
# from its own connection (kit.store.worker_link), outside the run path.
workers = Table(
    "workers",
    metadata,
    Column("worker_id", Text, primary_key=True),
    _tstz("heartbeat_at", nullable=False),
    _tstz("started_at", nullable=False, now_default=True),
    Column("concurrency", Integer, nullable=False),
    Column("in_flight", Integer, nullable=False, server_default=text("0")),
    # its per-tenant figures as of its last presence beat (kit.core.tenant_figures);
    # null from a worker that reports none
    Column("tenants", JSONB, nullable=True),
)

# The operator's kill switches (kit.core.switches): a run of a tenant, a task type or a
# priority tier a row here names is not claimed (kit.store.claims) nor published again
# (kit.store.reaping) until the row is deleted. Few rows, read by every claim.
SWITCH_KINDS = tuple(k.value for k in SwitchKind)
switches = Table(
    "switches",
    metadata,
    Column("kind", Text, nullable=False),
    Column("value", Text, nullable=False),
    Column("reason", Text, nullable=False, server_default=text("''")),
    Column("actor", Text, nullable=False),
    _tstz("since", nullable=False, now_default=True),
    PrimaryKeyConstraint("kind", "value"),
    CheckConstraint(_in("kind", SWITCH_KINDS), name="kind"),
)

# Every switch change: who turned which switch off or on, when, why, and at a lift what
# it did to the runs it held (kept to run, skipped by their job's misfire policy).
switch_audit = Table(
    "switch_audit",
    metadata,
    Column("audit_id", BigInteger, primary_key=True, autoincrement=True),
    _tstz("at", nullable=False, now_default=True),
    Column("actor", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("value", Text, nullable=False),
    Column("reason", Text, nullable=False, server_default=text("''")),
    Column("held", Integer),
    Column("skipped", Integer),
    CheckConstraint(_in("action", tuple(a.value for a in SwitchAction)), name="action"),
    Index(None, "at"),
)

# The shard map (kit.core.shard_map), read on the home shard: at most one row; none means
# every partition on the home shard. A move's flip is `UPDATE ... WHERE epoch = :seen`.
shard_map = Table(
    "shard_map",
    metadata,
    Column("id", SmallInteger, primary_key=True, server_default=text("1")),
    Column("epoch", BigInteger, nullable=False),
    Column("map", JSONB, nullable=False),
    Column("actor", Text, nullable=False),
    _tstz("written_at", nullable=False, now_default=True),
    CheckConstraint("id = 1", name="one_row"),
    CheckConstraint("epoch >= 0", name="epoch"),
)
