"""Read a drill's history once its fleet is quiet: jobs and runs from its database, the
witness's writes, the workers' execution journals and the tasks' own ledger."""

from __future__ import annotations

import sys
from pathlib import Path

from sqlalchemy import Engine, text

from chaos import ledger
from chaos.instrument import writes_read
from chaos.records import FaultWindow, History, JobFacts, Params, RunFacts, Start, interned
from chaos.workload import TENANT, CreatedJob
from kit.core.timeutil import to_epoch_ms
from kit.worker.journal import read_journal


def runs_read(engine: Engine) -> list[RunFacts]:
    """The drill tenant's runs, streamed, their repeated strings shared (sys.intern): the
    run id with the journal's, the ledger's and the witness's records of the same run."""
    out: list[RunFacts] = []
    s = interned
    with engine.connect().execution_options(stream_results=True, yield_per=20_000) as conn:
        rows = conn.execute(
            text(
                "SELECT run_id::text, job_id::text, scheduled_at, status, attempt, skip_reason, "
                "worker_id, error, created_at, dispatched_at, priority FROM runs "
                "WHERE tenant = :t"
            ),
            {"t": TENANT},
        )
        for r in rows:
            out.append(
                RunFacts(
                    sys.intern(r[0]),
                    sys.intern(r[1]),
                    to_epoch_ms(r[2]),
                    sys.intern(r[3]),
                    r[4],
                    s(r[5]),
                    s(r[6]),
                    r[7],
                    created_ms=to_epoch_ms(r[8]),
                    dispatched_ms=None if r[9] is None else to_epoch_ms(r[9]),
                    priority=s(r[10]),
                )
            )
    return out


def paused_at(engine: Engine) -> dict[str, int]:
    """When each paused job was paused (its last edit, by the database's clock)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT job_id::text, updated_at FROM jobs WHERE tenant = :t AND paused"),
            {"t": TENANT},
        ).all()
    return {r[0]: to_epoch_ms(r[1]) for r in rows}


def db_now_ms(engine: Engine) -> int:
    with engine.connect() as conn:
        return to_epoch_ms(conn.execute(text("SELECT now()")).scalar_one())


def journal_read(journal_dir: Path) -> list[Start]:
    out: list[Start] = []
    for path in sorted(journal_dir.glob("*.journal")):
        for run_id, attempt, started_ms, worker in read_journal(path):
            out.append(Start(sys.intern(run_id), attempt, started_ms, sys.intern(worker)))
    return out


def history_read(
    engine: Engine,
    created: dict[str, CreatedJob],
    ledger_dir: Path,
    journal_dir: Path,
    faults: list[FaultWindow],
    cycles: list[tuple[int, int]],
    params: Params,
    notes: list[str],
) -> History:
    paused = paused_at(engine)
    jobs = tuple(
        JobFacts(
            job_id=j.job_id,
            name=j.name,
            mode=j.mode,
            kind=j.kind,
            schedule=j.schedule,
            misfire=j.misfire,
            max_attempts=j.max_attempts,
            created_ms=j.created_ms,
            paused_ms=paused.get(j.job_id),
        )
        for j in created.values()
    )
    return History(
        jobs=jobs,
        runs=tuple(runs_read(engine)),
        starts=tuple(journal_read(journal_dir)),
        executions=tuple(ledger.executions(ledger_dir)),
        effects=tuple(ledger.effects(ledger_dir)),
        writes=tuple(writes_read(engine)),
        faults=tuple(faults),
        cycles=tuple(cycles),
        end_ms=db_now_ms(engine),
        params=params,
        notes=tuple(notes),
    )
