"""The operator's kill switches (kit.core.switches) in the database: turn one off or on,
list them with the runs they hold, and say which switch holds a run.

A switch is a row of `switches`. While it is there, the claim (kit.store.claims) takes
no run it holds: the worker consumes the message, claims nothing, and the run stays
pending; the reaper's republish (kit.store.reaping) leaves such runs alone. Deleting
the row (`switch_on`) applies each job's misfire policy to the runs it held in the same
transaction (kit.core.switches.plan_lift); the runs kept were published before the
instant the workers have read past, so the reaper's next pass counts them as lost and
publishes them again: nothing else has to. A run a worker had already claimed (its
second within the scan-ahead) or started is not stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine, text

from kit.core.policies import MisfirePolicy
from kit.core.switches import HeldRun, Switch, SwitchKind, held_note, plan_lift
from kit.core.timeutil import to_epoch_ms
from kit.core.trigger import QUEUED, SKIP_MISFIRE
from kit.store.db import NOW_SQL
from kit.store.scheduling import pg_array
from kit.store.vocab import RUN_PENDING, RUN_SKIPPED


def held_sql(run: str, task_type: str | None = None) -> str:
    """True when a switch holds the run aliased `run` (its tenant, its tier, its job's
    task type: `task_type`, an expression, or looked up by the run's job). With no row
    in `switches` (the usual case) this reads an empty table."""
    tt = task_type or (
        f"(SELECT sj.task_spec->>'type' FROM jobs sj WHERE sj.job_id = {run}.job_id)"
    )
    return (
        "EXISTS (SELECT 1 FROM switches s WHERE "
        f"(s.kind = 'tenant' AND s.value = {run}.tenant) "
        f"OR (s.kind = 'tier' AND s.value = {run}.priority) "
        f"OR (s.kind = 'task_type' AND s.value = {tt}))"
    )


def _matches(switch: Switch) -> str:
    if switch.kind is SwitchKind.tenant:
        return "r.tenant = :value"
    if switch.kind is SwitchKind.tier:
        return "r.priority = :value"
    return "(SELECT j.task_spec->>'type' FROM jobs j WHERE j.job_id = r.job_id) = :value"


# A held run: pending (not held back by the overlap policy 'queue', which the switch
# does not hold), due (its second or its retry time has come).
_DUE = (
    f"r.status = {RUN_PENDING} AND r.skip_reason IS DISTINCT FROM '{QUEUED}' "
    f"AND greatest(r.scheduled_at, r.retry_at) <= {NOW_SQL}"
)


@dataclass(frozen=True)
class SwitchState:
    kind: str
    value: str
    reason: str
    actor: str
    since: datetime
    held: int  # runs due and not started because of it

    @property
    def switch(self) -> Switch:
        return Switch(SwitchKind(self.kind), self.value)


@dataclass(frozen=True)
class Lifted:
    switch: Switch
    since: datetime
    kept: list[str]  # held runs that run now (the reaper publishes them again)
    skipped: list[str]  # held runs the job's misfire policy skipped


class SwitchNotOff(Exception):
    """`switch on` for a switch that is not off."""

    def __init__(self, switch: Switch) -> None:
        super().__init__(f"no switch is off for {switch}")
        self.switch = switch


def switch_off(
    engine: Engine, switch: Switch, reason: str, actor: str, now: datetime | None = None
) -> tuple[SwitchState, bool]:
    """Turn the switch off (stop starting its runs). (state, changed): a switch already
    off keeps its time and gets the new reason only if one is given; audited either way
    only when something changed."""
    params = {"kind": switch.kind.value, "value": switch.value, "reason": reason, "now": now}
    with engine.begin() as conn:
        row = conn.execute(
            text(
                f"""
                INSERT INTO switches (kind, value, reason, actor, since)
                VALUES (:kind, :value, :reason, :actor, {NOW_SQL})
                ON CONFLICT (kind, value) DO NOTHING
                RETURNING since
                """
            ),
            {**params, "actor": actor},
        ).first()
        changed = row is not None
        if not changed and reason:
            changed = (
                conn.execute(
                    text(
                        "UPDATE switches SET reason = :reason WHERE kind = :kind "
                        "AND value = :value AND reason <> :reason"
                    ),
                    params,
                ).rowcount
                > 0
            )
        if changed:
            _audit(conn, actor, "off", switch, reason, now)
        state = _states(conn, switch)[0]
    return state, changed


def switch_on(
    engine: Engine,
    switch: Switch,
    actor: str,
    misfire_grace_ms: int,
    reason: str = "",
    now: datetime | None = None,
) -> Lifted:
    """Lift the switch: its row goes, and each held run (one no other switch still
    holds) is kept or skipped by its job's misfire policy, in one transaction with the
    audit entry. SwitchNotOff if it was not off."""
    params = {"kind": switch.kind.value, "value": switch.value, "now": now}
    with engine.begin() as conn:
        gone = conn.execute(
            text(
                "DELETE FROM switches WHERE kind = :kind AND value = :value "
                f"RETURNING since, {NOW_SQL} AS at"
            ),
            params,
        ).first()
        if gone is None:
            raise SwitchNotOff(switch)
        rows = conn.execute(
            text(
                f"""
                SELECT r.run_id::text, r.job_id::text, r.scheduled_at, r.trigger_kind,
                    r.attempt, j.misfire
                FROM runs r LEFT JOIN jobs j ON j.job_id = r.job_id
                WHERE {_DUE} AND {_matches(switch)} AND NOT {held_sql("r")}
                ORDER BY r.run_id
                FOR UPDATE OF r
                """
            ),
            params,
        ).all()
        held = [
            HeldRun(r.run_id, r.job_id, to_epoch_ms(r.scheduled_at), r.trigger_kind, r.attempt)
            for r in rows
        ]
        policies = {r.job_id: MisfirePolicy.parse(r.misfire) for r in rows if r.misfire}
        plan = plan_lift(held, policies, to_epoch_ms(gone.at), misfire_grace_ms)
        if plan.skipped:
            conn.execute(
                text(
                    f"""
                    UPDATE runs SET status = {RUN_SKIPPED}, skip_reason = '{SKIP_MISFIRE}',
                        finished_at = {NOW_SQL},
                        error = :why
                    WHERE run_id = ANY(CAST(:ids AS uuid[])) AND status = {RUN_PENDING}
                    """
                ),
                {
                    "ids": pg_array(plan.skipped),
                    "now": now,
                    "why": f"held by the switch off for {switch} since "
                    f"{gone.since.isoformat()}; its misfire policy skipped it when the "
                    "switch was lifted",
                },
            )
        _audit(conn, actor, "on", switch, reason, now, len(held), len(plan.skipped))
    return Lifted(switch, gone.since, plan.kept, plan.skipped)


def _audit(
    conn: Connection,
    actor: str,
    action: str,
    switch: Switch,
    reason: str,
    now: datetime | None,
    held: int | None = None,
    skipped: int | None = None,
) -> None:
    conn.execute(
        text(
            f"""
            INSERT INTO switch_audit (at, actor, action, kind, value, reason, held, skipped)
            VALUES ({NOW_SQL}, :actor, :action, :kind, :value, :reason, :held, :skipped)
            """
        ),
        {
            "now": now,
            "actor": actor,
            "action": action,
            "kind": switch.kind.value,
            "value": switch.value,
            "reason": reason,
            "held": held,
            "skipped": skipped,
        },
    )


def _states(conn: Connection, only: Switch | None = None) -> list[SwitchState]:
    where = "WHERE s.kind = :kind AND s.value = :value" if only else ""
    rows = conn.execute(
        text(
            f"""
            SELECT s.kind, s.value, s.reason, s.actor, s.since,
                (SELECT count(*) FROM runs r WHERE {_DUE} AND (
                    (s.kind = 'tenant' AND r.tenant = s.value)
                    OR (s.kind = 'tier' AND r.priority = s.value)
                    OR (s.kind = 'task_type' AND (SELECT j.task_spec->>'type' FROM jobs j
                                                  WHERE j.job_id = r.job_id) = s.value)
                )) AS held
            FROM switches s {where}
            ORDER BY s.since, s.kind, s.value
            """
        ),
        {
            "now": None,
            "kind": only.kind.value if only else None,
            "value": only.value if only else None,
        },
    ).all()
    return [SwitchState(r.kind, r.value, r.reason, r.actor, r.since, r.held) for r in rows]


def switches_off(engine: Engine) -> tuple[Switch, ...]:
    """The switches that are off now (the workers read them about once a second)."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT kind, value FROM switches ORDER BY kind, value")).all()
    return tuple(Switch(SwitchKind(r.kind), r.value) for r in rows)


def switches_list(engine: Engine) -> list[SwitchState]:
    """Every switch that is off, oldest first, with the runs it holds now."""
    with engine.connect() as conn:
        return _states(conn)


@dataclass(frozen=True)
class SwitchAuditEntry:
    at: datetime
    actor: str
    action: str
    kind: str
    value: str
    reason: str
    held: int | None
    skipped: int | None


def switch_audit_list(engine: Engine, limit: int = 100) -> list[SwitchAuditEntry]:
    """The latest switch changes, newest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT at, actor, action, kind, value, reason, held, skipped "
                "FROM switch_audit ORDER BY audit_id DESC LIMIT :limit"
            ),
            {"limit": limit},
        ).all()
    return [SwitchAuditEntry(*row) for row in rows]


def held_by(conn: Connection, tenant: str, tier: str, task_type: str | None) -> str | None:
    """What holds a run of `tenant` at `tier` of `task_type` (kit.core.switches.held_note
    of the oldest switch that does), or None if no switch does."""
    row = conn.execute(
        text(
            """
            SELECT kind, value, reason, since FROM switches
            WHERE (kind = 'tenant' AND value = :tenant) OR (kind = 'tier' AND value = :tier)
               OR (kind = 'task_type' AND value = :task_type)
            ORDER BY since LIMIT 1
            """
        ),
        {"tenant": tenant, "tier": tier, "task_type": task_type},
    ).first()
    return None if row is None else held_note(row.kind, row.value, row.since, row.reason)
