"""The schema's CHECK constraints that hold a core closed set, shared by the unit test
(the MetaData) and the integration test (the migrated database)."""

from __future__ import annotations

import re

from kit.core.audit import AuditAction
from kit.core.dispatch import PriorityTier
from kit.core.leases import RunStatus
from kit.core.notify import NotificationStatus
from kit.core.policies import OverlapPolicy
from kit.core.queue_task import TaskStatus
from kit.core.switches import SwitchAction, SwitchKind
from kit.core.trigger import TRIGGER_ROW_KINDS, TriggerKind

# (table, CHECK constraint name) -> the values the core allows in that column, in order.
CHECKED_COLUMNS: dict[tuple[str, str], tuple[str, ...]] = {
    ("runs", "ck_runs_status"): tuple(RunStatus),
    ("runs", "ck_runs_trigger_kind"): tuple(TriggerKind),
    ("triggers", "ck_triggers_kind"): tuple(TRIGGER_ROW_KINDS),
    ("jobs", "ck_jobs_overlap"): tuple(OverlapPolicy),
    ("jobs", "ck_jobs_priority"): tuple(PriorityTier),
    ("queue_tasks", "ck_queue_tasks_status"): tuple(TaskStatus),
    ("job_audit", "ck_job_audit_action"): tuple(AuditAction),
    ("notifications", "ck_notifications_status"): tuple(NotificationStatus),
    ("switches", "ck_switches_kind"): tuple(SwitchKind),
    ("switch_audit", "ck_switch_audit_action"): tuple(SwitchAction),
}


def quoted(sql: str) -> list[str]:
    """The string literals of an `x IN ('a', 'b')` text, in order."""
    return re.findall(r"'([^']*)'", sql)
