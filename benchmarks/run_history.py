"""Benchmark of the run history's day partitions (issue 12): do inserting runs, the hot
path's claim and finish, the reaper's scans, a lookup by id and the daily maintenance
stay flat as day partitions accumulate, and how much storage does a run take?

Simulated days, the clock passed in: a fresh database is migrated with the kit's own
`kit.store.migrate.upgrade`, a few thousand jobs are made with
`kit.store.jobs.jobs_create_batch`, then for each simulated day d = 0..D-1 (day 0 is
today, UTC) the benchmark, always at that day's `now`:

1. calls `kit.store.run_history.maintain_run_history(engine, 30 days, ahead_days=3,
   now=day start)` (the retention: --retention-days) and times it, and each of its
   statements (create a day, detach, copy the kept runs, drop, prune the default
   partition) through SQLAlchemy's cursor events;
2. inserts the day's runs, spread over the day, with kit run ids
   (`kit.core.ids.run_id`) through the scheduler's own insert
   (`kit.store.scheduling.runs_insert`, the `ON CONFLICT (run_id) DO NOTHING`
   statement), in batches of one scan's worth, timed per run;
3. brings them to the states the fleet would, as the day goes (each twentieth of the
   day once inserted; the partition vacuumed each fifth, as autovacuum would): every run
   is rewritten by a claim (status running, lease token, worker, dispatched_at) and a
   finish (succeeded, started_at, finished_at), two bulk UPDATEs, so each row has the
   versions a finished run has; then a few are set back: 320 pending for the claim
   benchmark, 64 pending whose message is lost and 64 running with an expired lease for
   the reaper (both finished at the end of the day), 20 retry_scheduled and 5 dead with
   dead letters
   (`kit.store.dead_letters.dead_letter_in`) that stay, so every drop has runs to keep;
4. at now = day start + 23 h times: 5 batches of 64 through `kit.store.claims.runs_claim`
   and `runs_finish_ok`; one working pass of `kit.store.reaping.runs_reap_expired` and
   `runs_publish_unclaimed` (no-op publish), then 5 empty passes of each (their scan
   cost alone); the scheduler's due query `kit.store.scheduling.triggers_due` over all
   1024 partitions with 400 triggers due (10 passes, rolled back: it reads triggers and
   jobs, not runs, so it is the control); 20 lookups by id through the API's
   `kit.store.runs.run_get` on runs of the oldest kept day.

At the end: storage per run from a full day's partition (VACUUM ANALYZE, then
pg_total_relation_size / rows; VACUUM FULL for the compacted bound), the 30-day size at
170 M runs a day, EXPLAIN (ANALYZE, BUFFERS) of the statements the kit issued on the
first and the last day, a table of every day and the first-5 against the last-5 days.

The engine is the kit's own (kit.store.db.engine_for), which turns JIT off: with the
server's default `jit = on` the batch finish JIT-compiled once `runs` had about 13
partitions and took seconds past 25 (docs/run-history.md); `--jit on` shows that again.

Run (docs/run-history.md, N = 1..3):
        PYTHONPATH=. python benchmarks/run_history.py --max-minutes 9 \
            --json benchmarks/results/run_history/runN.json \
            --plot docs/plots/run_history.png \
            --explain /tmp/run_history-runN.explain.txt
Quick:  PYTHONPATH=. python benchmarks/run_history.py --days 4 --runs-per-day 5000
Quick, with drops:  ... --days 4 --runs-per-day 1892 --retention-days 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from scratch_db import drop_database, log, pg_url, recreate_database, server_facts
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import make_url

from kit.core.dispatch import scan_window
from kit.core.ids import run_id, run_id_floor
from kit.core.partitions import PARTITION_COUNT
from kit.core.schedule import parse_schedule
from kit.core.timeutil import to_epoch_ms
from kit.core.trigger import overlap_limit_ms
from kit.settings import load_settings
from kit.store import migrate
from kit.store.claims import Claim, runs_claim, runs_finish_ok
from kit.store.db import engine_for
from kit.store.dead_letters import dead_letter_in
from kit.store.jobs import JobSpec, jobs_create_batch
from kit.store.reaping import runs_publish_unclaimed, runs_reap_expired
from kit.store.run_history import maintain_run_history, partition_name, run_partitions
from kit.store.runs import run_get
from kit.store.scheduling import RunRows, runs_insert, triggers_due

DAY = timedelta(days=1)
DAY_MS = 86_400_000
RETENTION_DAYS = 30  # the kit's default run_retention_s (kit.settings), in days
AHEAD_DAYS = 3
TENANT = "acme"
CLAIM_BATCH = 64
CLAIM_BATCHES = 5
REAPER_PENDING = 64
REAPER_RUNNING = 64
KEPT_RETRY = 20
KEPT_DEAD = 5
EMPTY_PASSES = 5
DUE_PASSES = 10
DUE_TRIGGERS = 400
LOOKUPS = 20
MEASURE_AT = timedelta(hours=23)
GRACE_MS = 60_000
LEASE_TTL_MS = 30_000
RUNS_A_DAY_AT_SCALE = 170e6
WORK_CHUNKS = 20


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 5 samples is their max: said so in the docs)."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]


class StatementClock:
    """Wall time of every statement the kit issues, by a label the caller sets, so the
    maintenance pass is split into create / detach / keep / drop / prune, and the
    statements of a day can be replayed under EXPLAIN."""

    def __init__(self, engine: Engine) -> None:
        self.label = ""
        self.times: dict[str, float] = {}
        self.seen: dict[str, list[tuple[str, Any]]] = {}
        self._t0 = 0.0
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, conn: Any, cur: Any, stmt: str, params: Any, ctx: Any, many: bool) -> None:
        self._t0 = time.perf_counter()

    def _after(self, conn: Any, cur: Any, stmt: str, params: Any, ctx: Any, many: bool) -> None:
        ms = (time.perf_counter() - self._t0) * 1000
        kind = maintenance_kind(stmt) if self.label == "maintenance" else self.label
        self.times[kind] = self.times.get(kind, 0.0) + ms
        if self.label:
            self.seen.setdefault(self.label, []).append((stmt, params))

    @contextmanager
    def labelled(self, label: str) -> Iterator[None]:
        self.label, self.times, self.seen = label, {}, {}
        try:
            yield
        finally:
            self.label = ""


def maintenance_kind(stmt: str) -> str:
    s = " ".join(stmt.split())
    if s.startswith("CREATE TABLE") and "PARTITION OF" in s:
        return "create"
    if "DETACH PARTITION" in s:
        return "detach"
    if s.startswith("INSERT INTO runs SELECT") and "runs_2" in s:
        return "keep"
    if s.startswith("DROP TABLE runs_"):
        return "drop"
    if s.startswith("DELETE FROM runs_default"):
        return "prune"
    if "DELETE FROM runs_default" in s or "_moving" in s:
        return "create"  # the default partition checked for the new day's rows
    return "other"


@dataclass
class Day:
    day: int
    date: str
    partitions: int = 0
    maint_ms: float = 0.0
    maint_parts_ms: dict[str, float] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    dropped_rows: int = 0
    kept: int = 0
    insert_us_per_run: float = 0.0
    insert_batch_ms: list[float] = field(default_factory=list)
    finish_bulk_s: float = 0.0
    claim_ms: list[float] = field(default_factory=list)
    finish_ms: list[float] = field(default_factory=list)
    claim_finish_ms: list[float] = field(default_factory=list)
    reap_expired_work_ms: float = 0.0
    reaped: int = 0
    publish_unclaimed_work_ms: float = 0.0
    published: int = 0
    reap_expired_empty_ms: list[float] = field(default_factory=list)
    publish_unclaimed_empty_ms: list[float] = field(default_factory=list)
    due_ms: list[float] = field(default_factory=list)
    due_rows: int = 0
    lookup_ms: list[float] = field(default_factory=list)
    lookup_day: int = 0
    wall_s: float = 0.0
    busy: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        """The per-day figures the table, the summary and the plot use."""
        return {
            "insert_us_run": self.insert_us_per_run,
            "insert_batch_p99_ms": pct(self.insert_batch_ms, 99),
            "claim_finish_p50_ms": pct(self.claim_finish_ms, 50),
            "claim_finish_p99_ms": pct(self.claim_finish_ms, 99),
            "reap_expired_work_ms": self.reap_expired_work_ms,
            "publish_unclaimed_work_ms": self.publish_unclaimed_work_ms,
            "reaper_work_ms": self.reap_expired_work_ms + self.publish_unclaimed_work_ms,
            "reap_expired_empty_p99_ms": pct(self.reap_expired_empty_ms, 99),
            "publish_unclaimed_empty_p99_ms": pct(self.publish_unclaimed_empty_ms, 99),
            "due_p50_ms": pct(self.due_ms, 50),
            "due_p99_ms": pct(self.due_ms, 99),
            "lookup_p50_ms": pct(self.lookup_ms, 50),
            "lookup_p99_ms": pct(self.lookup_ms, 99),
            "maint_ms": self.maint_ms,
        }


class Fleet:
    """The jobs and the deterministic layout of every day's runs: run i of day d is
    job i mod J at day start + i * (day / N), so any run id can be made again."""

    def __init__(self, job_ids: list[str], runs_per_day: int, t0: datetime) -> None:
        self.job_ids = job_ids
        self.n = runs_per_day
        self.t0_ms = to_epoch_ms(t0)

    def ms(self, d: int, i: int) -> int:
        return self.t0_ms + d * DAY_MS + (i * DAY_MS) // self.n

    def rid(self, d: int, i: int) -> str:
        return run_id(self.job_ids[i % len(self.job_ids)], self.ms(d, i))

    def job(self, i: int) -> str:
        return self.job_ids[i % len(self.job_ids)]


def make_jobs(engine: Engine, count: int, t0: datetime) -> list[str]:
    """Jobs as the API makes them (hourly, noop task, 3 attempts), with their triggers."""
    schedule = parse_schedule({"every_s": 3600}, now=t0)
    specs = [
        JobSpec(
            name=f"history-{k:05d}",
            schedule=schedule,
            task={"type": "noop"},
            retry={"max_attempts": 3, "base_s": 1.0, "cap_s": 10.0, "jitter": "none"},
            misfire={"kind": "run_once", "deadline_s": 60},
            timeout_s=60,
        )
        for k in range(count)
    ]
    return jobs_create_batch(engine, TENANT, specs, now=t0)


def insert_day(engine: Engine, fleet: Fleet, d: int, batch: int, day: Day) -> None:
    """The day's runs through the scheduler's own insert, one scan's worth per call (only
    those calls timed). As the day goes, the fleet works what was inserted: every
    `WORK_CHUNKS`-th of the day is claimed and finished in bulk, and the partition is
    vacuumed each fifth of the day (autovacuum's default scale factor, 0.2), so later
    inserts may reuse the space of earlier runs' dead row versions, as they would live."""
    name = partition_name(datetime.fromtimestamp(fleet.ms(d, 0) / 1000, UTC).date())
    chunk = max(batch, fleet.n // WORK_CHUNKS)
    vacuum_every = max(chunk, fleet.n // 5)
    total = 0.0
    worked = vacuumed = 0
    for lo in range(0, fleet.n, batch):
        hi = min(fleet.n, lo + batch)
        rows = RunRows()
        for i in range(lo, hi):
            rows.run_ids.append(fleet.rid(d, i))
            rows.job_ids.append(fleet.job(i))
            rows.tenants.append(TENANT)
            rows.versions.append(1)
            rows.priorities.append("normal")
            rows.scheduled_at_ms.append(fleet.ms(d, i))
            rows.statuses.append("pending")
            rows.kinds.append("schedule")
            rows.skip_reasons.append(None)
        t = time.perf_counter()
        with engine.begin() as conn:
            inserted = runs_insert(conn, rows)
        dt = time.perf_counter() - t
        if len(inserted) != len(rows):
            raise RuntimeError(f"day {d}: {len(rows) - len(inserted)} runs already there")
        total += dt
        day.insert_batch_ms.append(dt * 1000)
        if hi - worked >= chunk or hi == fleet.n:
            t = time.perf_counter()
            work_runs(engine, name, fleet.ms(d, worked), fleet.ms(d, hi - 1) + 1)
            worked = hi
            if hi - vacuumed >= vacuum_every or hi == fleet.n:
                with engine.connect() as conn:
                    conn.execution_options(isolation_level="AUTOCOMMIT")
                    conn.execute(text(f"VACUUM {name}"))
                vacuumed = hi
            day.finish_bulk_s += time.perf_counter() - t
    day.insert_us_per_run = total / fleet.n * 1e6


def work_runs(engine: Engine, name: str, lo_ms: int, hi_ms: int) -> None:
    """What the fleet does to every run of [lo_ms, hi_ms): a claim (with the scheduler's
    dispatched_at folded in) and a finish, each a rewrite of the row."""
    where = " WHERE run_id >= CAST(:lo AS uuid) AND run_id < CAST(:hi AS uuid)"
    bounds = {"lo": run_id_floor(lo_ms), "hi": run_id_floor(hi_ms)}
    with engine.begin() as conn:
        conn.execute(
            text(
                f"UPDATE {name} SET status = 'running', lease_token = gen_random_uuid()::text,"
                " lease_expires_at = scheduled_at + interval '30 s', worker_id = 'worker-07',"
                " dispatched_at = scheduled_at" + where
            ),
            bounds,
        )
    with engine.begin() as conn:
        conn.execute(
            text(
                f"UPDATE {name} SET status = 'succeeded', lease_token = NULL,"
                " lease_expires_at = NULL, started_at = scheduled_at + interval '40 ms',"
                " finished_at = scheduled_at + interval '1.2 s'" + where
            ),
            bounds,
        )


@dataclass(frozen=True)
class Reserved:
    """Which runs of a day are not simply finished (by index in the day)."""

    claim: list[int]
    lost: list[int]
    expired: list[int]
    retry: list[int]
    dead: list[int]


def reserve(n: int) -> Reserved:
    """Spread over the day by a fixed stride (no RNG: the same runs in every series)."""
    want = CLAIM_BATCH * CLAIM_BATCHES + REAPER_PENDING + REAPER_RUNNING + KEPT_RETRY + KEPT_DEAD
    if n < want * 4:
        raise SystemExit(f"--runs-per-day must be at least {want * 4}")
    step = n // want
    picks = [k * step + step // 2 for k in range(want)]
    a = CLAIM_BATCH * CLAIM_BATCHES
    b, c, e = a + REAPER_PENDING, a + REAPER_PENDING + REAPER_RUNNING, want - KEPT_DEAD
    return Reserved(picks[:a], picks[a:b], picks[b:c], picks[c:e], picks[e:])


def finish_day(engine: Engine, fleet: Fleet, d: int, res: Reserved) -> float:
    """The reserved runs put in their states (after the fleet worked them all, as
    insert_day did). Returns seconds."""
    t = time.perf_counter()
    with engine.begin() as conn:

        def ids(idx: list[int]) -> dict[str, list[str]]:
            return {"ids": [fleet.rid(d, i) for i in idx]}

        conn.execute(
            text(
                "UPDATE runs SET status = 'pending', dispatched_at = NULL, started_at = NULL,"
                " finished_at = NULL, worker_id = NULL WHERE run_id = ANY(CAST(:ids AS uuid[]))"
            ),
            ids(res.claim),
        )
        conn.execute(  # published at their second, never claimed: the message is lost
            text(  # created_at too: inserted now (wall clock), they would look just sent
                "UPDATE runs SET status = 'pending', started_at = NULL, finished_at = NULL,"
                " worker_id = NULL, created_at = scheduled_at, dispatched_at = scheduled_at"
                " WHERE run_id = ANY(CAST(:ids AS uuid[]))"
            ),
            ids(res.lost),
        )
        conn.execute(  # their worker vanished: the lease ran out
            text(
                "UPDATE runs SET status = 'running', lease_token = gen_random_uuid()::text,"
                " lease_expires_at = scheduled_at + interval '30 s', finished_at = NULL"
                " WHERE run_id = ANY(CAST(:ids AS uuid[]))"
            ),
            ids(res.expired),
        )
        conn.execute(
            text(
                "UPDATE runs SET status = 'retry_scheduled', attempt = 2, finished_at = NULL,"
                " retry_at = scheduled_at + interval '40 days', error = 'exit status 1',"
                " errors = jsonb_build_array(jsonb_build_object('attempt', 1,"
                " 'error', 'exit status 1', 'finished_at', scheduled_at))"
                " WHERE run_id = ANY(CAST(:ids AS uuid[]))"
            ),
            ids(res.retry),
        )
        conn.execute(
            text(
                "UPDATE runs SET status = 'dead', attempt = 3, error = 'exit status 1',"
                " errors = (SELECT jsonb_agg(jsonb_build_object('attempt', a,"
                " 'error', 'exit status 1', 'finished_at', scheduled_at))"
                " FROM generate_series(1, 3) a) WHERE run_id = ANY(CAST(:ids AS uuid[]))"
            ),
            ids(res.dead),
        )
        for i in res.dead:
            dead_letter_in(conn, fleet.rid(d, i))
    return time.perf_counter() - t


def finish_transients(engine: Engine, fleet: Fleet, d: int, res: Reserved) -> None:
    """The reaper's runs of the day are worked by the fleet afterwards (so the next day's
    reaper has the same work, not a growing backlog)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE runs SET status = 'succeeded', lease_token = NULL,"
                " lease_expires_at = NULL, finished_at = scheduled_at + interval '2 min'"
                " WHERE run_id = ANY(CAST(:ids AS uuid[])) AND status IN ('pending', 'running')"
            ),
            {"ids": [fleet.rid(d, i) for i in res.lost + res.expired]},
        )


def noop_publish(_pointers: Sequence[Any]) -> None:
    """The reaper publishes inside its transaction; here there is no Kafka."""


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """Milliseconds of one call, and what it returned."""
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return (time.perf_counter() - t) * 1000, out


def measure_day(
    engine: Engine, fleet: Fleet, d: int, res: Reserved, day: Day, now: datetime, kept_days: int
) -> None:
    """The hot path's and the reaper's statements at the day's `now`."""
    for b in range(CLAIM_BATCHES):
        at = now + timedelta(milliseconds=b)
        claims = [Claim(fleet.rid(d, i), 1) for i in res.claim[b::CLAIM_BATCHES]]
        c_ms, claimed = timed(runs_claim, engine, claims, "worker-07", LEASE_TTL_MS, at)
        leases = [(c.run_id, c.lease_token) for c in claimed]
        f_ms, (accepted, _) = timed(runs_finish_ok, engine, leases, at)
        if len(claimed) != len(claims) or len(accepted) != len(claims):
            raise RuntimeError(f"day {d}: claimed {len(claimed)}, finished {len(accepted)}")
        day.claim_ms.append(c_ms)
        day.finish_ms.append(f_ms)
        day.claim_finish_ms.append(c_ms + f_ms)
    ms, reaped = timed(runs_reap_expired, engine, noop_publish, now=now)
    day.reap_expired_work_ms, day.reaped = ms, len(reaped.requeued) + len(reaped.dead)
    ms, found = timed(runs_publish_unclaimed, engine, GRACE_MS, noop_publish, now=now)
    day.publish_unclaimed_work_ms, day.published = ms, len(found.all)
    for k in range(1, EMPTY_PASSES + 1):
        at = now + timedelta(milliseconds=k)
        ms, _ = timed(runs_reap_expired, engine, noop_publish, now=at)
        day.reap_expired_empty_ms.append(ms)
        ms, _ = timed(runs_publish_unclaimed, engine, GRACE_MS, noop_publish, now=at)
        day.publish_unclaimed_empty_ms.append(ms)
    now_ms = to_epoch_ms(now)
    with engine.begin() as conn:  # DUE_TRIGGERS of the jobs' triggers come due at `now`
        conn.execute(
            text(
                "UPDATE triggers t SET fire_at = CAST(:now AS timestamptz)"
                " + (o.rn - :due) * interval '10 ms'"
                " FROM (SELECT ctid AS c, row_number() OVER (ORDER BY job_id) AS rn"
                " FROM triggers) o WHERE t.ctid = o.c"
            ),
            {"now": now, "due": DUE_TRIGGERS - 200},
        )
    _lo, hi_ms = scan_window(now_ms, 2000)
    parts = list(range(PARTITION_COUNT))
    for _ in range(DUE_PASSES):
        with engine.connect() as conn:
            t = time.perf_counter()
            rows = triggers_due(
                conn, parts, hi_ms, 20_000, overlap_hi_ms=overlap_limit_ms(now_ms, hi_ms)
            )
            day.due_ms.append((time.perf_counter() - t) * 1000)
            conn.rollback()
        day.due_rows = len(rows)
    day.lookup_day = max(0, d - kept_days)
    step = max(1, fleet.n // LOOKUPS)
    for k in range(LOOKUPS):
        rid = fleet.rid(day.lookup_day, k * step + 7)
        ms, rec = timed(run_get, engine, TENANT, rid)
        if rec.run_id != rid:
            raise RuntimeError("lookup by id returned another run")
        day.lookup_ms.append(ms)


def explain_seen(
    url: str, seen: dict[str, list[tuple[str, Any]]], labels: list[str], jit: str
) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the statements the kit issued under `labels`, each
    in a transaction rolled back (so a write is measured, not kept)."""
    out = []
    done: set[str] = set()
    with psycopg.connect(url, options="-c jit=on" if jit == "on" else "-c jit=off") as conn:
        for label in labels:
            for stmt, params in seen.get(label, []):
                if stmt in done:
                    continue
                done.add(stmt)
                first = stmt.lstrip().split(None, 1)[0].upper()
                if first not in ("SELECT", "WITH", "UPDATE", "DELETE", "INSERT"):
                    continue
                try:
                    rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + stmt, params).fetchall()
                    plan = "\n".join(r[0] for r in rows)
                except psycopg.Error as err:
                    plan = f"(not explained: {err})"
                conn.rollback()
                out.append(f"--- {label}\n{' '.join(stmt.split())[:300]}\n{plan}\n")
    return "\n".join(out)


def storage(url: str, name: str, ahead: str | None) -> dict[str, Any]:
    """A full day's partition: bytes per run after VACUUM ANALYZE, and after VACUUM FULL
    (the compacted bound), table, indexes and TOAST apart."""
    sizes = (
        "SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid),"
        " pg_indexes_size(c.oid), coalesce(pg_total_relation_size(c.reltoastrelid), 0)"
        " FROM pg_class c WHERE c.oid = CAST(%s AS regclass)"
    )
    out: dict[str, Any] = {"partition": name}
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
        out["rows"] = rows
        max_err = conn.execute(f"SELECT coalesce(max(length(error)), 0) FROM {name}").fetchone()
        out["max_error_chars"] = max_err[0]
        for how in ("VACUUM (ANALYZE)", "VACUUM (FULL, ANALYZE)"):
            conn.execute(f"{how} {name}")
            total, heap, idx, toast = conn.execute(sizes, (name,)).fetchone()
            key = "vacuumed" if "FULL" not in how else "compacted"
            out[key] = {
                "total_bytes": total,
                "heap_bytes": heap,
                "index_bytes": idx,
                "toast_bytes": toast,
                "bytes_per_run": total / rows,
            }
        if ahead:
            out["empty_day_bytes"] = conn.execute(sizes, (ahead,)).fetchone()[0]
    per = out["vacuumed"]["bytes_per_run"]
    out["size_30d_at_170m_bytes"] = per * RUNS_A_DAY_AT_SCALE * 30 + AHEAD_DAYS * out.get(
        "empty_day_bytes", 0
    )
    out["size_30d_at_170m_compacted_bytes"] = (
        out["compacted"]["bytes_per_run"] * RUNS_A_DAY_AT_SCALE * 30
    )
    return out


def table(days: list[Day]) -> str:
    head = (
        f"{'day':>3} {'date':>10} {'parts':>5} {'ins us/run':>10} {'c+f p50':>8} {'c+f p99':>8}"
        f" {'reap ms':>8} {'r.empty':>7} {'due p99':>7} {'get p99':>7} {'maint ms':>8}"
        f"  dropped/kept"
    )
    lines = [head]
    for x in days:
        f = x.figures()
        lines.append(
            f"{x.day:>3} {x.date:>10} {x.partitions:>5} {f['insert_us_run']:>10.1f}"
            f" {f['claim_finish_p50_ms']:>8.2f} {f['claim_finish_p99_ms']:>8.2f}"
            f" {f['reaper_work_ms']:>8.2f}"
            f" {f['reap_expired_empty_p99_ms'] + f['publish_unclaimed_empty_p99_ms']:>7.2f}"
            f" {f['due_p99_ms']:>7.2f} {f['lookup_p99_ms']:>7.2f} {f['maint_ms']:>8.1f}"
            f"  {','.join(x.dropped) or '-'}/{x.kept}"
        )
    return "\n".join(lines)


SUMMARY_KEYS = (
    ("insert_us_run", "insert, us/run (day mean)", "mean"),
    ("insert_batch_p99_ms", "insert batch, ms p99", "p99"),
    ("claim_finish_p50_ms", "claim+finish 64, ms p50", "p50"),
    ("claim_finish_p99_ms", "claim+finish 64, ms p99", "p99"),
    ("reaper_work_ms", "reaper working pass, ms", "mean"),
    ("reap_expired_empty_p99_ms", "reap_expired empty, ms p99", "p99"),
    ("publish_unclaimed_empty_p99_ms", "publish_unclaimed empty, ms p99", "p99"),
    ("due_p99_ms", "due query, ms p99", "p99"),
    ("lookup_p99_ms", "run_get oldest day, ms p99", "p99"),
)


def summary(days: list[Day], k: int = 5) -> list[dict[str, Any]]:
    """First k days against the last k: per-day p99s pooled as their max and median, the
    raw samples pooled for a p99 over all k days."""
    first, last = days[:k], days[-k:]
    raw = {
        "claim_finish_p50_ms": ("claim_finish_ms", 50),
        "claim_finish_p99_ms": ("claim_finish_ms", 99),
        "insert_batch_p99_ms": ("insert_batch_ms", 99),
        "reap_expired_empty_p99_ms": ("reap_expired_empty_ms", 99),
        "publish_unclaimed_empty_p99_ms": ("publish_unclaimed_empty_ms", 99),
        "due_p99_ms": ("due_ms", 99),
        "lookup_p99_ms": ("lookup_ms", 99),
    }
    out = []
    for key, label, _ in SUMMARY_KEYS:
        row: dict[str, Any] = {"figure": key, "label": label}
        for name, group in (("first", first), ("last", last)):
            per_day = [x.figures()[key] for x in group]
            if key in raw:
                attr, q = raw[key]
                row[name] = pct([v for x in group for v in getattr(x, attr)], q)
            else:
                row[name] = statistics.mean(per_day)
            row[name + "_days"] = per_day
        row["ratio"] = row["last"] / row["first"] if row["first"] else float("nan")
        out.append(row)
    maint_create = [x.maint_ms for x in days if x.created and not x.dropped]
    maint_drop = [x.maint_ms for x in days if x.dropped]
    out.append(
        {
            "figure": "maint_ms",
            "label": "maintenance pass, ms (create only / create+drop days)",
            "first": statistics.mean(maint_create[:k]) if maint_create else float("nan"),
            "last": statistics.mean(maint_drop[-k:]) if maint_drop else float("nan"),
            "ratio": float("nan"),
        }
    )
    return out


def plot(days: list[Day], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [x.day for x in days]
    fig, ax = plt.subplots(figsize=(10, 5))
    series = (
        ("insert_us_run", "insert, us/run"),
        ("claim_finish_p50_ms", "claim+finish of 64, ms p50"),
        ("claim_finish_p99_ms", "claim+finish of 64, ms p99"),
        ("reaper_work_ms", "reaper pass (both queries, with work), ms"),
        ("maint_ms", "maintenance pass, ms"),
        ("lookup_p99_ms", "run_get (oldest kept day), ms p99"),
    )
    for key, label in series:
        ax.plot(xs, [x.figures()[key] for x in days], ".-", lw=1, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("simulated day (the clock passed in)")
    ax.set_ylabel("wall time (log)")
    ax.grid(True, which="both", alpha=0.3)
    ax2 = ax.twinx()
    ax2.step(xs, [x.partitions for x in days], where="mid", color="grey", lw=1.5, alpha=0.6)
    ax2.set_ylabel("partitions of runs (grey)")
    ax2.set_ylim(0, max(x.partitions for x in days) * 1.15)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=40, help="simulated days")
    ap.add_argument("--runs-per-day", type=int, default=80_000)
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--insert-batch", type=int, default=2000, help="runs per runs_insert call")
    ap.add_argument("--db-name", default="cronfleet_bench_history")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database")
    ap.add_argument("--max-minutes", type=float, default=12.0, help="stop after this long")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--explain", type=Path, help="EXPLAIN of day 0 and the last day here")
    ap.add_argument("--label", default="", help="a name for this run in the plot title")
    ap.add_argument(
        "--retention-days",
        type=int,
        default=RETENTION_DAYS,
        help="days of runs kept; fewer, with fewer --days, reach the drops in a short run",
    )
    ap.add_argument(
        "--jit",
        choices=("kit", "on"),
        default="kit",
        help="kit: the kit's own engine (kit.store.db.engine_for: jit off on its connections);"
        " on: the same engine with jit = on, PostgreSQL's default, to show what it costs",
    )
    args = ap.parse_args(argv)
    if args.days < 2 or args.runs_per_day < 1:
        ap.error("--days >= 2")
    if args.retention_days < 1:
        ap.error("--retention-days >= 1")
    command = shlex.join(["python", "benchmarks/run_history.py", *sys.argv[1:]])
    started = time.perf_counter()
    load_at_start = os.getloadavg()
    settings = load_settings()
    admin = make_url(settings.database_url)
    db = admin.set(database=args.db_name)
    server, knobs = server_facts(admin)
    log(f"server: {server}; {knobs}")
    log(
        f"client: Python {platform.python_version()}, psycopg {psycopg.__version__},"
        f" {os.cpu_count()} cores; load average {load_at_start[0]:.2f} {load_at_start[1]:.2f}"
        f" {load_at_start[2]:.2f} at start"
    )
    t0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    recreate_database(admin, args.db_name)
    days: list[Day] = []
    explain_text = ""
    store: dict[str, Any] = {}
    engine: Engine | None = None
    jit = "?"
    try:
        migrate.upgrade(db.render_as_string(hide_password=False))
        engine = engine_for(
            db.render_as_string(hide_password=False),
            pool_size=4,
            session={"jit": "on"} if args.jit == "on" else None,
        )
        with engine.connect() as conn:
            jit = conn.execute(text("SHOW jit")).scalar_one()
        log(f"jit = {jit} on the kit's connections (--jit {args.jit})")
        clock = StatementClock(engine)
        job_ids = make_jobs(engine, args.jobs, t0)
        fleet = Fleet(job_ids, args.runs_per_day, t0)
        res = reserve(args.runs_per_day)
        log(
            f"database {args.db_name}: migrated, {len(job_ids):,} jobs; {args.days} simulated"
            f" days from {t0:%Y-%m-%d} of {args.runs_per_day:,} runs, retention"
            f" {args.retention_days} days, {AHEAD_DAYS} days ahead; measured at day start +"
            f" {MEASURE_AT}"
        )
        log(table([]).splitlines()[0])
        explain_first = ""
        for d in range(args.days):
            if (time.perf_counter() - started) / 60 > args.max_minutes:
                log(f"stopping after {d} days: --max-minutes {args.max_minutes} reached")
                break
            t_day = time.perf_counter()
            start = t0 + d * DAY
            day = Day(d, f"{start:%Y-%m-%d}")
            with clock.labelled("maintenance"):
                day.maint_ms, done = timed(
                    maintain_run_history,
                    engine,
                    args.retention_days * 86_400,
                    AHEAD_DAYS,
                    now=start,
                )
                day.maint_parts_ms = {k: round(v, 2) for k, v in clock.times.items()}
            day.busy = list(done.busy)  # lock not had in LOCK_TIMEOUT: the next pass retries
            day.created = [f"{x:%m%d}" for x in done.created]
            day.dropped = [f"{x.day:%m%d}" for x in done.dropped]
            day.dropped_rows = sum(x.rows_estimate for x in done.dropped)
            day.kept = sum(x.kept for x in done.dropped)
            with engine.connect() as conn:
                day.partitions = len(run_partitions(conn))
            with clock.labelled("insert"):
                insert_day(engine, fleet, d, args.insert_batch, day)
                seen = {"insert": clock.seen.get("insert", [])[-1:]}
            day.finish_bulk_s += finish_day(engine, fleet, d, res)
            with engine.connect() as conn:  # as autovacuum would have, by the end of a day
                conn.execute(text(f"ANALYZE {partition_name(start.date())}"))
            now = start + MEASURE_AT
            with clock.labelled("measure"):
                measure_day(engine, fleet, d, res, day, now, args.retention_days)
                seen["measure"] = clock.seen.get("measure", [])
            finish_transients(engine, fleet, d, res)
            if d == 0 and args.explain:
                explain_first = explain_seen(pg_url(db), seen, ["insert", "measure"], args.jit)
            day.wall_s = time.perf_counter() - t_day
            days.append(day)
            f = day.figures()
            log(
                f"{table([day]).splitlines()[1]}   [{day.wall_s:.1f} s; insert p99"
                f" {f['insert_batch_p99_ms']:.1f} ms/{args.insert_batch}; bulk finish"
                f" {day.finish_bulk_s:.1f} s; reaped {day.reaped}, published {day.published};"
                f" maint {day.maint_parts_ms}; created {','.join(day.created) or '-'}"
                f"{'; BUSY ' + ','.join(day.busy) if day.busy else ''}]"
            )
        if args.explain and days:
            url = pg_url(db)
            explain_text = (
                f"==== day 0 ({days[0].partitions} partitions)\n"
                + explain_first
                + f"\n==== last day ({days[-1].day}, {days[-1].partitions} partitions)\n"
                + explain_seen(url, seen, ["insert", "measure"], args.jit)
            )
            args.explain.parent.mkdir(parents=True, exist_ok=True)
            args.explain.write_text(explain_text)
            log(f"wrote {args.explain}")
        with engine.connect() as conn:
            parts = run_partitions(conn)
        last = (t0 + (len(days) - 1) * DAY).date()
        full = [p for p in parts if p.day is not None and p.day < last]
        ahead = [p for p in parts if p.day is not None and p.day > last]
        store = storage(pg_url(db), full[-1].name, ahead[-1].name if ahead else None)
    finally:
        if engine is not None:
            engine.dispose()
        if not args.keep:
            drop_database(admin, args.db_name)
    if not days:
        return 1
    log("\n== every day")
    log(table(days))
    rows = summary(days)
    k = min(5, len(days))
    log(
        f"\n== first {k} days ({days[0].partitions}-{days[k - 1].partitions} partitions) against"
        f" the last {k} ({days[-k].partitions}-{days[-1].partitions})"
    )
    for r in rows:
        log(f"{r['label']:<58} {r['first']:>9.2f} {r['last']:>9.2f}  x{r['ratio']:.2f}")
    v, c = store["vacuumed"], store["compacted"]
    log(
        f"\n== storage: {store['partition']}, {store['rows']:,} runs (each rewritten by a claim"
        f" and a finish; longest error text {store['max_error_chars']} chars)\n"
        f"after VACUUM ANALYZE: {v['total_bytes'] / 2**20:,.1f} MiB = heap"
        f" {v['heap_bytes'] / 2**20:,.1f} + indexes {v['index_bytes'] / 2**20:,.1f} + TOAST"
        f" {v['toast_bytes'] / 2**20:,.2f} MiB: {v['bytes_per_run']:,.0f} B/run\n"
        f"after VACUUM FULL (compacted bound): {c['bytes_per_run']:,.0f} B/run\n"
        f"30 days at 170 M runs/day: {store['size_30d_at_170m_bytes'] / 1e12:,.2f} TB"
        f" ({store['size_30d_at_170m_bytes'] / 2**40:,.2f} TiB) as stored;"
        f" {store['size_30d_at_170m_compacted_bytes'] / 1e12:,.2f} TB compacted;"
        f" days ahead, empty: {store.get('empty_day_bytes', 0) / 1024:.0f} KiB each"
    )
    load_end = os.getloadavg()
    wall = time.perf_counter() - started
    log(f"\nwall {wall / 60:.1f} min; load average {load_end[0]:.2f} at the end")
    log(f"reproduce: PYTHONPATH=. {command}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": command,
            "server": server,
            "settings": knobs,
            "cores": os.cpu_count(),
            "load_average_start": load_at_start,
            "load_average_end": load_end,
            "wall_s": wall,
            "t0": t0.isoformat(),
            "jit": jit,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "summary": rows,
            "storage": store,
            "days": [{**asdict(x), "figures": x.figures()} for x in days],
        }
        args.json.write_text(json.dumps(payload, indent=1, default=str))
        log(f"wrote {args.json}")
    if args.plot:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        plot(
            days,
            args.plot,
            f"run history, {args.runs_per_day:,} runs/simulated day,"
            f" retention {args.retention_days} days"
            f" {args.label}".strip(),
        )
        log(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
