"""The core's statuses as SQL literals, for the store's statements.

kit.core owns every status vocabulary (kit.core.vocabulary indexes them). The store's
statements name a status only through the constants here, rendered once at import
into module-level SQL text, so a statement's text stays the same string on every call
(its prepared statement and plan too) and no status is a bare literal outside the
migrations (tests/unit/test_status_literals.py holds that).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum

from kit.core.leases import BUSY, RunStatus
from kit.core.notify import FINISHED_NOTIFICATIONS, NotificationStatus
from kit.core.queue_task import COUNTED, FINISHED, LEASABLE, TaskStatus
from kit.core.run_state import RunState
from kit.core.trigger import TriggerKind

# A value rendered between single quotes must be a plain word: nothing to escape.
_WORD = re.compile(r"[a-z][a-z_]*")


def sql_status(member: StrEnum) -> str:
    """`member` as a quoted SQL literal: only a member of a core enum whose value is a
    plain word, so the quoting can never be broken."""
    if not isinstance(member, StrEnum):
        raise TypeError(f"not a member of a core vocabulary: {member!r}")
    if not _WORD.fullmatch(member.value):
        raise ValueError(f"{member!r}: not a plain word, not rendered as SQL")
    return f"'{member.value}'"


def sql_statuses(members: Sequence[StrEnum]) -> str:
    """`members` as a parenthesised SQL list, in the order given. A set is refused: its
    order differs between processes (string hashing is seeded), a statement's text must
    not."""
    if isinstance(members, (set, frozenset)) or not isinstance(members, Sequence):
        raise TypeError("give the statuses in an order (a tuple): a set has none")
    if not members:
        raise ValueError("an empty list of statuses is not SQL")
    return "(" + ", ".join(sql_status(m) for m in members) + ")"


# runs.status (kit.core.leases.RunStatus)
RUN_PENDING = sql_status(RunStatus.pending)
RUN_RUNNING = sql_status(RunStatus.running)
RUN_SUCCEEDED = sql_status(RunStatus.succeeded)
RUN_RETRY_SCHEDULED = sql_status(RunStatus.retry_scheduled)
RUN_DEAD = sql_status(RunStatus.dead)
RUN_SKIPPED = sql_status(RunStatus.skipped)
RUN_CANCELLED = sql_status(RunStatus.cancelled)
# The statuses that keep a job busy for its overlap policy (kit.core.leases.BUSY), sorted:
# the text of the partial index ix_runs_busy_job_id (migration 0007).
BUSY_SQL = sql_statuses(sorted(BUSY))

# What made a run (runs.trigger_kind) and a trigger row's kind (triggers.kind)
# (kit.core.trigger.TriggerKind)
KIND_SCHEDULE = sql_status(TriggerKind.schedule)
KIND_RETRY = sql_status(TriggerKind.retry)
KIND_BACKFILL = sql_status(TriggerKind.backfill)
# Runs nobody else publishes at once: no scheduler scan sends them (kit.store.reaping)
PUBLISHED_BY_REAPER_SQL = sql_statuses((TriggerKind.manual, TriggerKind.backfill))

# A run's state as the API shows it (kit.core.run_state.RunState; kit.store.runs.run_state_sql)
STATE_CLAIMED = sql_status(RunState.claimed)
STATE_RUNNING = sql_status(RunState.running)

# queue_tasks.status (kit.core.queue_task.TaskStatus)
TASK_QUEUED = sql_status(TaskStatus.queued)
TASK_LEASED = sql_status(TaskStatus.leased)
TASK_DEAD = sql_status(TaskStatus.dead)
LEASABLE_SQL = sql_statuses(LEASABLE)
COUNTED_SQL = sql_statuses(COUNTED)
FINISHED_TASKS_SQL = sql_statuses(tuple(s for s in TaskStatus if s in FINISHED))

# notifications.status (kit.core.notify.NotificationStatus)
NOTIFICATION_PENDING = sql_status(NotificationStatus.pending)
NOTIFICATION_FAILED = sql_status(NotificationStatus.failed)
NOTIFICATION_SENT = sql_status(NotificationStatus.sent)
FINISHED_NOTIFICATIONS_SQL = sql_statuses(
    tuple(s for s in NotificationStatus if s in FINISHED_NOTIFICATIONS)
)
