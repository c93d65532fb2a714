"""No run statement reads the runs table once per row, even on statistics that lie.

The failing Locust storms of issue 8: after one storm, autovacuum analyzed a runs table
whose every row had finished, so the planner believed the partial index of pending runs
(`ix_runs_pending`) empty and chose it to find each claimed run by id: a scan of every
pending run per run claimed (15 ms a run at 50k pending, 27 s p99). The same trap waits
for any lookup by run id that also names a status some partial index is built on.

Here the statistics are made stale on purpose (finished runs analyzed, then pending and
running runs inserted with autovacuum off), and every statement the worker and the
reaper issue is run under EXPLAIN ANALYZE and must examine a few rows per run it touches
(a batch of 64 runs: at most 512 rows; the reaper's queued runs: 4 per run), where the
defects read thousands to millions (the figures before the fix are in each test)."""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine

from kit.store.claims import (
    Claim,
    run_finish_failed,
    run_finish_ok,
    runs_claim,
    runs_finish_ok,
    runs_heartbeat,
    runs_preempt,
    runs_release,
    runs_return,
)
from kit.store.reaping import runs_publish_unclaimed, runs_reap_expired
from kit.store.run_history import run_partitions
from kit.store.scheduling import runs_cancel_retries, runs_rearm

OLD_FINISHED = 30_000  # analyzed: the statistics say no run is pending or running
NEW_PENDING = 15_000  # inserted after the analyze
NEW_RUNNING = 3_000
NEW_QUEUED = 500  # of the pending runs
NEW_RETRYING = 2_000
JOBS = 600
BATCH = 64


def _examined(plan: dict[str, Any]) -> int:
    """Rows a plan node and its children read: returned plus removed by filters, per loop."""
    loops = plan.get("Actual Loops", 1)
    own = (
        plan.get("Actual Rows", 0)
        + plan.get("Rows Removed by Filter", 0)
        + plan.get("Rows Removed by Index Recheck", 0)
    ) * loops
    scans = plan["Node Type"].endswith("Scan") and "CTE" not in plan["Node Type"]
    children = sum(_examined(p) for p in plan.get("Plans", []))
    return (own if scans else 0) + children


@dataclass
class Explained:
    """Each statement run on the engine, explained (ANALYZE) first inside a savepoint."""

    plans: list[tuple[str, int, str]] = field(default_factory=list)
    blocks: list[tuple[str, int]] = field(default_factory=list)  # buffers touched

    def worst(self) -> tuple[str, int, str]:
        return max(self.plans, key=lambda p: p[1])


@pytest.fixture
def explained(engine: Engine) -> Iterator[Explained]:
    found = Explained()

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        head = statement.lstrip().split(None, 1)[0].upper()
        if executemany or head not in {"SELECT", "UPDATE", "WITH", "INSERT", "DELETE"}:
            return
        if "runs" not in statement:
            return
        cursor.execute("SAVEPOINT explain_probe")
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, parameters)
        plan = cursor.fetchone()[0]
        cursor.execute("ROLLBACK TO SAVEPOINT explain_probe")
        root = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
        short = " ".join(statement.split())[:160]
        found.plans.append((short, _examined(root), json.dumps(root)))
        found.blocks.append(
            (short, root.get("Shared Hit Blocks", 0) + root.get("Shared Read Blocks", 0))
        )

    event.listen(engine, "before_cursor_execute", before)
    yield found
    event.remove(engine, "before_cursor_execute", before)


@dataclass
class StaleRuns:
    pending: list[tuple[str, int]]  # (run_id, attempt)
    running: list[tuple[str, str]]  # (run_id, lease_token)
    retrying: list[tuple[str, int]]  # (run_id, attempt)


# Run ids laid out as the kit's (kit.core.ids: the scheduled instant's epoch ms in the
# first 48 bits), so the rows land in their day's partition as real runs do.
_INSERT = """
INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at, status, trigger_kind,
                  lease_token, lease_expires_at, worker_id, finished_at, created_at)
SELECT CAST(lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0')
            || substr(md5(random()::text || g), 1, 20) AS uuid),
       (CAST(:jobs AS uuid[]))[1 + g % :njobs], 'acme', 1,
       at, :status, 'schedule',
       CASE WHEN :status = 'running' THEN gen_random_uuid()::text END,
       CASE WHEN :status = 'running' THEN now() + :expires * interval '1 second' END,
       CASE WHEN :status = 'running' THEN 'w-probe' END,
       CASE WHEN :status = 'succeeded' THEN now() END,
       now() - interval '10 minutes'
FROM generate_series(1, :n) g,
     LATERAL (SELECT now() - interval '10 minutes' + (g % 600) * interval '1 second' AS at) t
"""


@pytest.fixture
def stale(engine: Engine) -> StaleRuns:
    jobs = "{" + ",".join(str(uuid.uuid4()) for _ in range(JOBS)) + "}"
    with engine.begin() as conn:
        for part in run_partitions(conn):  # a partitioned table has no storage of its own
            conn.execute(text(f"ALTER TABLE {part.name} SET (autovacuum_enabled = false)"))
        conn.execute(
            text(_INSERT),
            {"jobs": jobs, "njobs": JOBS, "status": "succeeded", "n": OLD_FINISHED, "expires": 0},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE runs"))
    with engine.begin() as conn:
        conn.execute(
            text(_INSERT),
            {"jobs": jobs, "njobs": JOBS, "status": "pending", "n": NEW_PENDING, "expires": 0},
        )
        # Half the running runs hold live leases, half expired ones (for the reaper).
        for expires in (300, -60):
            conn.execute(
                text(_INSERT),
                {
                    "jobs": jobs,
                    "njobs": JOBS,
                    "status": "running",
                    "n": NEW_RUNNING // 2,
                    "expires": expires,
                },
            )
        conn.execute(
            text(
                "UPDATE runs SET status = 'retry_scheduled', retry_at = now() WHERE run_id IN ("
                "SELECT run_id FROM runs WHERE status = 'pending' ORDER BY scheduled_at LIMIT :n)"
            ),
            {"n": NEW_RETRYING},
        )
        retrying = conn.execute(
            text(
                "SELECT run_id::text, attempt FROM runs WHERE status = 'retry_scheduled' LIMIT :n"
            ),
            {"n": 4 * BATCH},
        ).all()
        # Overlap 'queue': a run of a job held back behind its busy one.
        conn.execute(
            text(
                "UPDATE runs SET skip_reason = 'queued' WHERE run_id IN ("
                "SELECT run_id FROM runs WHERE status = 'pending' ORDER BY scheduled_at DESC "
                "LIMIT :n)"
            ),
            {"n": NEW_QUEUED},
        )
        pending = conn.execute(
            text(
                "SELECT run_id::text, attempt FROM runs "
                "WHERE status = 'pending' AND skip_reason IS NULL LIMIT :n"
            ),
            {"n": 4 * BATCH},
        ).all()
        running = conn.execute(
            text(
                "SELECT run_id::text, lease_token FROM runs "
                "WHERE status = 'running' AND lease_expires_at > now() LIMIT :n"
            ),
            {"n": 4 * BATCH},
        ).all()
        ratio = conn.execute(
            text(
                "SELECT most_common_freqs[array_position(most_common_vals::text::text[], "
                "'succeeded')] FROM pg_stats WHERE tablename = 'runs' AND attname = 'status'"
            )
        ).scalar_one()
    assert ratio == pytest.approx(1.0), "the statistics should say every run has finished"
    return StaleRuns(
        [(r, a) for r, a in pending],
        [(r, t) for r, t in running],
        [(r, a) for r, a in retrying],
    )


def _batch_list_per_row(plan: dict[str, Any]) -> str | None:
    """A node run more than once whose condition holds an array (`= ANY (...)`): a list
    evaluated whole for every row looked up, quadratic in the batch (rows examined do
    not show it; a burst of 50,000 runs did, at 111 s of PostgreSQL CPU)."""
    if plan.get("Actual Loops", 1) > 1:
        for key in ("Index Cond", "Filter", "Recheck Cond", "Join Filter"):
            lists = re.findall(r"ANY \('\{([^}]*)\}'", plan.get(key, ""))
            if any(len(items.split(",")) > 16 for items in lists):  # not `status IN (...)`
                return f"{plan['Node Type']} x{plan['Actual Loops']}: {key} {plan[key][:200]}"
    for child in plan.get("Plans", []):
        if (found := _batch_list_per_row(child)) is not None:
            return found
    return None


def _assert_rows_examined_at_most(explained: Explained, bound: int) -> None:
    assert explained.plans, "no statement was explained"
    for statement, _, plan in explained.plans:
        per_row = _batch_list_per_row(json.loads(plan))
        assert per_row is None, f"{statement}: {per_row}"
    statement, rows, plan = explained.worst()
    assert rows <= bound, (
        f"{rows} rows examined (at most {bound}) by: {statement}\nplan: {plan[:3000]}"
    )


def test_claim_finds_each_run_by_its_key(
    engine: Engine, stale: StaleRuns, explained: Explained
) -> None:
    claims = [Claim(run_id=r, attempt=a) for r, a in stale.pending[:BATCH]]
    claimed = runs_claim(engine, claims, "w-1", 30_000)
    assert len(claimed) == BATCH
    # Before: 1,152,192 rows (the busy-runs index read whole per run claimed).
    _assert_rows_examined_at_most(explained, 8 * BATCH)


def test_heartbeat_and_batched_finish(
    engine: Engine, stale: StaleRuns, explained: Explained
) -> None:
    leases = stale.running[:BATCH]
    kept, lost = runs_heartbeat(engine, leases, 30_000)
    assert kept == {r for r, _ in leases} and not lost
    accepted, _ = runs_finish_ok(engine, leases)
    assert accepted == {r for r, _ in leases}
    # Before: 1,692 (heartbeat) and 3,128 (finish): every running run read per batch.
    _assert_rows_examined_at_most(explained, 8 * BATCH)


def test_single_finishes_return_and_release(
    engine: Engine, stale: StaleRuns, explained: Explained
) -> None:
    (ok_id, ok_token), (bad_id, bad_token) = stale.running[0], stale.running[1]
    assert run_finish_ok(engine, ok_id, ok_token).accepted
    assert run_finish_failed(engine, bad_id, bad_token, "boom", random.Random(1)).accepted
    returned = runs_return(engine, stale.running[2 : 2 + BATCH])
    assert len(returned) == BATCH
    released = runs_release(engine, stale.running[2 + BATCH : 2 + 2 * BATCH])
    assert released == BATCH
    preempted = runs_preempt(engine, stale.running[2 + 2 * BATCH : 2 + 3 * BATCH], "preempted")
    assert len(preempted) == BATCH
    # Before: 3,000 for one run's success, 17,999 for one failure, ~3,000 per batch
    # returned or released.
    _assert_rows_examined_at_most(explained, 8 * BATCH)


def test_reaper_passes(engine: Engine, stale: StaleRuns, explained: Explained) -> None:
    published: list[Any] = []
    reaped = runs_reap_expired(engine, published.extend, limit=BATCH)
    # (requeued also holds the queued runs a dead run's job released: not reaped ones)
    running = {r for r, _ in stale.running}
    assert len([p for p in reaped.requeued if p.run_id in running]) + len(reaped.dead) == BATCH
    runs_publish_unclaimed(engine, grace_ms=60_000, publish=published.extend, limit=BATCH)
    # Before: 4.6 million (the queued-run release read every busy run per queued run)
    # and 17,936 (marking 64 runs published read every pending run).
    _assert_rows_examined_at_most(explained, max(8 * BATCH, 4 * NEW_QUEUED))


def test_scheduler_rearms_and_cancels_retries_by_key(
    engine: Engine, stale: StaleRuns, explained: Explained
) -> None:
    rearm = dict((r, a + 1) for r, a in stale.retrying[:BATCH])
    cancel = {r: "job paused" for r, _ in stale.retrying[BATCH : 2 * BATCH]}
    with engine.begin() as conn:
        assert runs_rearm(conn, rearm) == set(rearm)
        runs_cancel_retries(conn, cancel)
    _assert_rows_examined_at_most(explained, 8 * BATCH)


def test_a_large_batch_costs_the_same_per_run(
    engine: Engine, stale: StaleRuns, explained: Explained
) -> None:
    """Rows examined do not see an index condition that probes the whole batch once per
    run looked up (the batch named for partition pruning, put beside the key in a
    per-run lookup: 50,000 runs of a burst cost PostgreSQL 111 s). Buffers do: a batch of
    2,000 claimed, heartbeaten and finished touches a bounded number of pages per run."""
    with engine.connect() as conn:
        wanted = conn.execute(
            text(
                "SELECT run_id::text, attempt FROM runs WHERE status = 'pending' "
                "AND skip_reason IS NULL ORDER BY run_id LIMIT 2000"
            )
        ).all()
    claimed = runs_claim(engine, [Claim(r, a) for r, a in wanted], "w-big", 30_000)
    assert len(claimed) == len(wanted)
    leases = [(c.run_id, c.lease_token) for c in claimed]
    kept, _ = runs_heartbeat(engine, leases, 30_000)
    assert len(kept) == len(leases)
    accepted, _ = runs_finish_ok(engine, leases)
    assert len(accepted) == len(leases)
    worst = max(explained.blocks, key=lambda b: b[1])
    assert worst[1] <= 40 * len(wanted), f"{worst[1]} buffers for {len(wanted)} runs: {worst[0]}"
    _assert_rows_examined_at_most(explained, 30 * len(wanted))
