"""The operator's kill switch: stop starting runs of a tenant, a task type or a priority
tier fleet-wide, and what lifting it does to the runs it held.

A switch holds runs, it drops none: a held run stays pending (a worker that receives
it claims nothing) until the switch is lifted. Lifting applies each job's misfire
policy to its held schedule runs whose second is past the misfire grace, as the
scheduler does after an outage (`plan_misfire`): `run_all` runs them all, `run_once`
only the latest, `skip_late` those within the deadline; the others are skipped with
the reason `misfire`. A manual run, a backfill run and a retry are kept: someone asked
for each of them, or it already started once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from kit.core.dispatch import PRIORITY_TIERS
from kit.core.errors import FieldError
from kit.core.policies import MisfirePolicy, plan_misfire

MAX_VALUE_CHARS = 200
MAX_REASON_CHARS = 500


class SwitchKind(StrEnum):
    tenant = "tenant"
    task_type = "task_type"
    tier = "tier"


SWITCH_KINDS: tuple[str, ...] = tuple(k.value for k in SwitchKind)


class SwitchAction(StrEnum):
    """What a switch audit entry records: a switch turned off, or lifted."""

    off = "off"
    on = "on"


@dataclass(frozen=True)
class Switch:
    kind: SwitchKind
    value: str

    def holds(self, tenant: str, tier: str, task_type: str | None) -> bool:
        """Whether this switch holds a run of `tenant`, at `tier`, of `task_type`."""
        if self.kind is SwitchKind.tenant:
            return self.value == tenant
        if self.kind is SwitchKind.tier:
            return self.value == tier
        return task_type is not None and self.value == task_type

    def __str__(self) -> str:
        return f"{self.kind.value.replace('_', ' ')} {self.value}"


def holding(
    switches: Iterable[Switch], tenant: str, tier: str, task_type: str | None
) -> Switch | None:
    """The first of `switches` that holds a run of `tenant` at `tier` of `task_type`: what
    a worker asks at a claimed run's start, so that a switch turned off after the claim
    (up to the scan-ahead before its second) still stops it."""
    return next((s for s in switches if s.holds(tenant, tier, task_type)), None)


def held_note(kind: str, value: str, since: datetime, reason: str) -> str:
    """What explain and the run page say of a run a switch holds."""
    why = f" ({reason})" if reason else ""
    name = kind.replace("_", " ")
    return f"held: switch off for {name} {value} since {since.isoformat()}{why}"


def parse_switch(kind: object, value: object, task_types: Iterable[str]) -> Switch:
    """A switch as an operator names it; FieldError naming `kind` or `value`."""
    if kind not in SWITCH_KINDS:
        raise FieldError("kind", f"must be one of {', '.join(SWITCH_KINDS)}")
    switch_kind = SwitchKind(str(kind))
    if not isinstance(value, str) or not value or len(value) > MAX_VALUE_CHARS:
        raise FieldError("value", f"must be a text of 1 to {MAX_VALUE_CHARS} characters")
    if switch_kind is SwitchKind.tier and value not in PRIORITY_TIERS:
        raise FieldError("value", f"a tier is one of {', '.join(PRIORITY_TIERS)}")
    types = tuple(task_types)
    if switch_kind is SwitchKind.task_type and value not in types:
        raise FieldError("value", f"a task type is one of {', '.join(types)}")
    return Switch(switch_kind, value)


def check_reason(reason: object) -> str:
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise FieldError("reason", f"must be a text of at most {MAX_REASON_CHARS} characters")
    return reason


@dataclass(frozen=True)
class HeldRun:
    """A pending run a lifted switch held."""

    run_id: str
    job_id: str
    scheduled_at_ms: int
    trigger_kind: str  # schedule | manual | backfill
    attempt: int


@dataclass(frozen=True)
class LiftPlan:
    kept: list[str]  # run ids to publish again (the reaper does: they count as lost)
    skipped: list[str]  # run ids the job's misfire policy skips


def plan_lift(
    held: Sequence[HeldRun],
    policies: Mapping[str, MisfirePolicy],
    now_ms: int,
    misfire_grace_ms: int,
) -> LiftPlan:
    """Which held runs run and which are skipped when their switch is lifted at `now_ms`.

    Per job, its held first-attempt schedule runs whose second is before `now_ms -
    misfire_grace_ms` are late, and go through `plan_misfire` with the job's policy
    (a job not in `policies`, deleted, keeps them: its runs end as a deleted job's do).
    Every held run lands in exactly one list (tests/property/test_switch_lift_props.py)."""
    late_before = now_ms - misfire_grace_ms
    late: dict[str, list[HeldRun]] = {}
    kept: list[str] = []
    for run in held:
        if (
            run.trigger_kind == "schedule"
            and run.attempt == 1
            and run.scheduled_at_ms < late_before
            and run.job_id in policies
        ):
            late.setdefault(run.job_id, []).append(run)
        else:
            kept.append(run.run_id)
    skipped: list[str] = []
    for job_id, runs in late.items():
        plan = plan_misfire([r.scheduled_at_ms for r in runs], now_ms, policies[job_id])
        skip_at = set(plan.skipped_ms)
        for run in runs:
            (skipped if run.scheduled_at_ms in skip_at else kept).append(run.run_id)
    return LiftPlan(kept, skipped)
