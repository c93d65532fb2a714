"""One run in full (GET /v1/runs/{id}, the console's run page): the run, every attempt
with its times, worker and outcome, and each attempt's output while it is kept.

A failed attempt is an entry of the run's error history (written by the finish or the
reaper in the same statement that ended it: its claim, start, due time, worker, end and
error); so is an attempt stopped for a paid tenant's run (`preempted`, kit.store.claims.
runs_preempt), which is not a failure: the same attempt runs again. The current attempt
is the run row's own columns. Outputs are rows of
`run_outputs` by (run id, attempt), expired under their own retention.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, literal_column, select, text

from kit.core.leases import RunStatus
from kit.core.waiting import TenantLoad
from kit.store.db import is_uuid
from kit.store.errors import RunNotFound
from kit.store.runs import STATE, RunRecord, run_record
from kit.store.schema import runs
from kit.store.switches import held_by
from kit.store.waiting import awaiting_sql, tenant_load

_AWAITING = literal_column(awaiting_sql()).label("awaiting")


@dataclass(frozen=True)
class Attempt:
    attempt: int
    # a run state for the current attempt; `failed` for one that failed; `preempted` for
    # one stopped for a paid run (the same attempt number runs again)
    outcome: str
    due_at: datetime | None
    claimed_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    worker_id: str | None
    error: str | None
    output: str | None = None  # None: nothing kept (none printed, or expired)
    stderr: str | None = None

    @property
    def lag_s(self) -> float | None:
        """How late the attempt started after it was due."""
        if self.started_at is None or self.due_at is None:
            return None
        return (self.started_at - self.due_at).total_seconds()


@dataclass(frozen=True)
class RunDetail:
    run: RunRecord
    attempts: list[Attempt]  # oldest first
    held: str | None = None  # pending and held by a kill switch: which, since when
    # due and not started (kit.store.waiting.awaiting_sql), and no switch holds it
    awaiting: bool = False
    task_type: str | None = None  # its job's (None: a deleted job), read when awaiting
    load: TenantLoad | None = None  # its tenant's, read when awaiting and asked for


def _instant(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(str(value))


def attempts_of(run: RunRecord, errors: list[dict[str, Any]]) -> list[Attempt]:
    """The failed attempts from the error history, then the current one unless it is the
    last of them (a dead run's) or there is none (a run skipped or cancelled before any
    worker held it)."""
    made = [
        Attempt(
            attempt=int(e["attempt"]),
            outcome="preempted" if e.get("preempted") else "failed",
            due_at=_instant(e.get("due_at")),
            claimed_at=_instant(e.get("claimed_at")),
            started_at=_instant(e.get("started_at")),
            finished_at=_instant(e.get("finished_at")),
            worker_id=e.get("worker_id"),
            error=e.get("error"),
        )
        for e in errors
        if isinstance(e, dict) and "attempt" in e
    ]
    done = {a.attempt for a in made if a.outcome == "failed"}
    status = run.status
    never_held = status in (RunStatus.skipped, RunStatus.cancelled) and run.claimed_at is None
    if run.attempt not in done and not never_held:
        started = run.attempt_started_at
        if started is None and run.attempt == 1:
            started = run.started_at  # a run finished before attempts had their own start
        ended = status in (RunStatus.succeeded, RunStatus.cancelled, RunStatus.dead)
        due = max(run.scheduled_at, run.retry_at) if run.retry_at else run.scheduled_at
        made.append(
            Attempt(
                attempt=run.attempt,
                outcome=run.shown_status,
                due_at=due,
                claimed_at=run.claimed_at,
                started_at=started,
                finished_at=run.finished_at if ended else None,
                worker_id=run.worker_id,
                error=run.error if status != RunStatus.succeeded else None,
            )
        )
    return made


def run_detail(
    engine: Engine, tenant: str, run_id: str, load_window_ms: int | None = None
) -> RunDetail:
    """`load_window_ms`: read the tenant's load (kit.store.waiting.tenant_load) if the run
    waits to start: the caller passes it only for a tenant a limit holds."""
    if not is_uuid(run_id):
        raise RunNotFound(run_id)
    with engine.begin() as conn:
        row = conn.execute(
            select(runs, STATE, _AWAITING).where(runs.c.tenant == tenant, runs.c.run_id == run_id)
        ).first()
        if row is None:
            raise RunNotFound(run_id)
        held, task_type, load = None, None, None
        if row.status == RunStatus.pending or row.awaiting:
            task_type = conn.execute(
                text("SELECT task_spec->>'type' FROM jobs WHERE job_id = :job_id"),
                {"job_id": row.job_id},
            ).scalar()
        if row.status == RunStatus.pending:
            held = held_by(conn, tenant, row.priority, task_type)
        awaiting = bool(row.awaiting) and held is None
        if awaiting and load_window_ms is not None:
            load = tenant_load(conn, tenant, load_window_ms)
        outputs = {
            o.attempt: o
            for o in conn.execute(
                text("SELECT attempt, output, stderr FROM run_outputs WHERE run_id = :run_id"),
                {"run_id": run_id},
            )
        }
    record = run_record(row)
    attempts = []
    for a in attempts_of(record, list(row.errors or [])):
        # a preempted attempt's output is not kept; what is kept under its number is the
        # output of the same attempt run again
        kept = outputs.get(a.attempt) if a.outcome != "preempted" else None
        if kept is not None:
            a = Attempt(**{**a.__dict__, "output": kept.output, "stderr": kept.stderr})
        attempts.append(a)
    return RunDetail(record, attempts, held, awaiting, task_type, load)
