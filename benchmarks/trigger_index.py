"""Benchmark of the trigger index: does the per-partition due scan stay fast as the
number of schedules grows from 1 million to 10 million?

Each size gets a fresh scratch database migrated with the project's own Alembic
migrations, so the real schema and its indexes are measured. Jobs (~1 KB each) and their
triggers are bulk-loaded with COPY into the already indexed tables (the realistic case:
a running system does not drop its indexes to take a bulk load), in chunks, one
transaction per chunk, jobs and triggers together, as `jobs_create_batch` does.

Fire times model a steady state: the trigger table holds each schedule's NEXT fire. At
`--rate` runs/s the steady schedules' next fires spread uniformly over
[T0, T0 + steady/rate); a top-of-hour spike of `--spike` schedules all fires at T0+3s.
The scan `partition_id = :p AND fire_at <= coalesce(:now, now()) + 5 s ORDER BY fire_at`
at now = T0 then returns what one scheduler node sees for one partition:
~rate*5/1024 ≈ 10 rows ("steady", measured before the spike jobs are loaded) and
~60 rows ("peak", after loading them). Latency is measured client-side over 127.0.0.1
after a warm-up pass over all partitions (a scheduler scans each of its partitions every
second, so the pages it needs stay hot).

Run:  python benchmarks/trigger_index.py --sizes 1e6,1e7 --json /tmp/ti.json --out /tmp/ti
Quick check:  python benchmarks/trigger_index.py --sizes 1e4,1e5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shlex
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from sqlalchemy.engine import URL, make_url

from kit.core.partitions import PARTITION_COUNT, partition_of
from kit.settings import cronfleet_home, load_settings
from kit.store import migrate

# The spike lands exactly on the top of an hour.
T0 = datetime(2029, 12, 31, 23, 59, 57, tzinfo=UTC)
SPIKE_OFFSET_S = 3
TENANTS = 1000
CREATED_AT = "2029-12-01 00:00:00+00"

SCAN_SQL = (
    "SELECT partition_id, fire_at, job_id, job_version, kind, attempt FROM triggers"
    " WHERE partition_id = %(p)s"
    " AND fire_at <= coalesce(%(now)s::timestamptz, now()) + %(ahead)s * interval '1 second'"
    " ORDER BY fire_at"
)
BATCH_SQL = (
    "SELECT partition_id, fire_at, job_id, job_version, kind, attempt FROM triggers"
    " WHERE partition_id = ANY(%(ps)s::smallint[])"
    " AND fire_at <= coalesce(%(now)s::timestamptz, now()) + %(ahead)s * interval '1 second'"
    " ORDER BY partition_id, fire_at"
)
LOCK_SQL = (
    "SELECT partition_id, fire_at, job_id, job_version FROM triggers"
    " WHERE partition_id = %(p)s"
    " AND fire_at <= coalesce(%(now)s::timestamptz, now()) + %(ahead)s * interval '1 second'"
    " ORDER BY fire_at FOR UPDATE SKIP LOCKED"
)
ADVANCE_SQL = (
    "UPDATE triggers AS t SET fire_at = v.next_at"
    " FROM unnest(%(ps)s::smallint[], %(fs)s::timestamptz[], %(js)s::uuid[],"
    " %(ns)s::timestamptz[]) AS v(p, f, j, next_at)"
    " WHERE t.partition_id = v.p AND t.fire_at = v.f AND t.job_id = v.j"
)
JOB_COLUMNS = (
    "job_id, tenant, name, schedule, timezone, task_spec, retry_policy, timeout_s, overlap,"
    " misfire, priority, jitter_s, paused, version, created_at, updated_at"
)

CRONS = (
    ("*/5 * * * *", "UTC"),
    ("0 */2 * * *", "Europe/Berlin"),
    ("30 6 * * 1-5", "America/New_York"),
    ("15 3 * * *", "Asia/Tokyo"),
    ("*/15 9-17 * * 1-5", "Europe/London"),
    ("0 0 1 * *", "Australia/Sydney"),
    ("45 * * * *", "America/Sao_Paulo"),
    ("10 22 * * 0", "Asia/Kolkata"),
)
PRIORITIES = ("critical", "high", "normal", "normal", "normal", "low")


# ---------------------------------------------------------------- rows


def job_id_of(bits: int) -> str:
    """A uuid4-shaped id from 128 seeded random bits (uuid.UUID() is 4x slower)."""
    x = f"{bits:032x}"
    return f"{x[:8]}-{x[8:12]}-4{x[13:16]}-a{x[17:20]}-{x[20:]}"


class JobLine:
    """COPY text lines for jobs of about `job_bytes` bytes each, with realistic JSON.

    A few dozen variants (schedule, priority, task) are rendered once; per row only the
    id, tenant, name and the task URL change. The JSON holds no backslash, tab or newline,
    so it needs no COPY escaping.
    """

    def __init__(self, job_bytes: int, spike: bool = False) -> None:
        self.variants: list[tuple[str, str]] = []
        crons = [("0 * * * *", "UTC")] if spike else list(CRONS)
        for k in range(48):
            cron, tz = crons[k % len(crons)]
            priority = PRIORITIES[k % len(PRIORITIES)]
            schedule = json.dumps({"cron": cron, "timezone": tz})
            retry = json.dumps(
                {"max_attempts": 3 + k % 5, "base_s": 1.0, "cap_s": 300.0, "jitter": True}
            )
            misfire = json.dumps(
                {"kind": ("run_once", "run_all", "skip")[k % 3], "deadline_s": 300}
            )
            headers = {
                "Content-Type": "application/x-www-form-urlencoded",
                "Authorization": "Bearer sk_live_" + f"{k:04d}" * 8,
                "X-Request-Source": "cronfleet",
                "User-Agent": "cronfleet-worker/0.1",
            }
            head = json.dumps({"type": "http", "method": "POST", "headers": headers})[:-1]
            self.variants.append(
                (
                    f'{schedule}\t{tz}\t{head}, "url": "https://hooks{k % 7}.example.org/v1/',
                    f"\t{retry}\t{60 * (1 + k % 30)}\t{('allow', 'forbid', 'queue')[k % 3]}"
                    f"\t{misfire}\t{priority}\t0\tf\t1\t{CREATED_AT}\t{CREATED_AT}\n",
                )
            )
        sample = self.render(0, "00000000-0000-4000-a000-000000000000", 'body": "')
        pad = max(0, job_bytes - len(sample.encode()) - 2)
        self.bodies = [self._body(k, pad) for k in range(len(self.variants))]
        self.mean_bytes = statistics.fmean(
            len(self.line(i, job_id_of(i + 1)).encode()) for i in range(len(self.variants) * 4)
        )

    @staticmethod
    def _body(k: int, n: int) -> str:
        words = f"report=daily&region=eu-west-{k % 3}&format=csv&include=all&limit=10000&"
        text = (words * (n // len(words) + 1))[:n]
        return f'"body": "{text}"'

    def render(self, i: int, job_id: str, body: str) -> str:
        head, tail = self.variants[i % len(self.variants)]
        return (
            f'{job_id}\ttenant-{i % TENANTS:04d}\tjob-{i:09d}\t{head}run/{job_id}", {body}}}{tail}'
        )

    def line(self, i: int, job_id: str) -> str:
        return self.render(i, job_id, self.bodies[i % len(self.bodies)])


class FireTimeText:
    """timestamptz COPY text from integer microseconds after T0, without datetime objects."""

    def __init__(self) -> None:
        self.base_us = (T0.hour * 3600 + T0.minute * 60 + T0.second) * 1_000_000
        self.days: dict[int, str] = {}

    def __call__(self, offset_us: int) -> str:
        day, rem = divmod(self.base_us + offset_us, 86_400_000_000)
        d = self.days.get(day)
        if d is None:
            d = self.days[day] = (T0.date() + timedelta(days=day)).isoformat()
        h, rem = divmod(rem, 3_600_000_000)
        m, rem = divmod(rem, 60_000_000)
        s, us = divmod(rem, 1_000_000)
        return f"{d} {h:02d}:{m:02d}:{s:02d}.{us:06d}+00"


# ---------------------------------------------------------------- results


@dataclass
class Latency:
    n: int = 0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    max_ms: float = math.nan
    mean_rows: float = math.nan

    @classmethod
    def of(cls, seconds: list[float], rows: list[int]) -> Latency:
        ms = np.array(seconds) * 1000.0
        return cls(
            n=len(ms),
            p50_ms=float(np.percentile(ms, 50)),
            p99_ms=float(np.percentile(ms, 99)),
            max_ms=float(ms.max()),
            mean_rows=float(np.mean(rows)),
        )

    def text(self) -> str:
        return f"p50 {self.p50_ms:.3f} ms  p99 {self.p99_ms:.3f} ms  max {self.max_ms:.3f} ms"


@dataclass
class SizeResult:
    size: int
    steady_rows: int
    spike_rows: int
    horizon_s: float
    job_line_bytes: float
    load_s: float = 0.0
    jobs_copy_s: float = 0.0
    triggers_copy_s: float = 0.0
    commit_s: float = 0.0
    generate_s: float = 0.0
    hash_s: float = 0.0
    jobs_bytes: int = 0
    triggers_bytes: int = 0
    vacuum_analyze_s: float = 0.0
    reindex_triggers_s: float | None = None
    scans: dict[str, dict[str, Any]] = field(default_factory=dict)
    buffers: dict[str, float] = field(default_factory=dict)
    btree_levels: int | None = None
    explain: dict[str, str] = field(default_factory=dict)
    sizes_bytes: dict[str, int] = field(default_factory=dict)
    hot_updates: dict[str, int] = field(default_factory=dict)

    @property
    def schedules_per_s(self) -> float:
        return self.size / (self.jobs_copy_s + self.triggers_copy_s + self.commit_s)

    @property
    def jobs_rows_per_s(self) -> float:
        return self.size / self.jobs_copy_s

    @property
    def jobs_mb_per_s(self) -> float:
        return self.jobs_bytes / 1e6 / self.jobs_copy_s

    @property
    def triggers_rows_per_s(self) -> float:
        return self.size / self.triggers_copy_s

    @property
    def triggers_mb_per_s(self) -> float:
        return self.triggers_bytes / 1e6 / self.triggers_copy_s


# ---------------------------------------------------------------- database


def pg_url(url: URL) -> str:
    """A libpq URL for psycopg from the SQLAlchemy URL of the settings."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def drop_database(admin: URL, name: str) -> None:
    """Without FORCE: that would try to terminate autovacuum workers, which this role may
    not signal; a plain DROP cancels them itself. Retried while a worker lets go."""
    with psycopg.connect(pg_url(admin), autocommit=True) as conn:
        for attempt in range(30):
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
                return
            except psycopg.errors.ObjectInUse:
                if attempt == 29:
                    raise
                time.sleep(1)


def recreate_database(admin: URL, name: str) -> None:
    drop_database(admin, name)
    with psycopg.connect(pg_url(admin), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def log(msg: str) -> None:
    print(msg, flush=True)


def load(
    conn: psycopg.Connection,
    result: SizeResult,
    first: int,
    count: int,
    offsets_us: np.ndarray,
    lines: JobLine,
    rng: random.Random,
    chunk_rows: int,
    total: int,
) -> None:
    """COPY `count` jobs and their triggers, one transaction per chunk."""
    fire_text = FireTimeText()
    done = 0
    t_start = time.perf_counter()
    last_report = t_start
    while done < count:
        n = min(chunk_rows, count - done)
        t0 = time.perf_counter()
        base = first + done
        ids = [job_id_of(rng.getrandbits(128)) for _ in range(n)]
        t1 = time.perf_counter()
        parts = [partition_of(j) for j in ids]
        t2 = time.perf_counter()
        jobs_buf = "".join([lines.line(base + k, ids[k]) for k in range(n)]).encode()
        offs = offsets_us[done : done + n].tolist()
        trig_buf = "".join(
            [f"{parts[k]}\t{fire_text(offs[k])}\t{ids[k]}\t1\tschedule\t1\n" for k in range(n)]
        ).encode()
        t3 = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy(f"COPY jobs ({JOB_COLUMNS}) FROM STDIN") as copy:
                copy.write(jobs_buf)
            t4 = time.perf_counter()
            with cur.copy(
                "COPY triggers (partition_id, fire_at, job_id, job_version, kind, attempt)"
                " FROM STDIN"
            ) as copy:
                copy.write(trig_buf)
        t5 = time.perf_counter()
        conn.commit()
        t6 = time.perf_counter()
        result.generate_s += (t1 - t0) + (t3 - t2)
        result.hash_s += t2 - t1
        result.jobs_copy_s += t4 - t3
        result.triggers_copy_s += t5 - t4
        result.commit_s += t6 - t5
        result.jobs_bytes += len(jobs_buf)
        result.triggers_bytes += len(trig_buf)
        done += n
        now = time.perf_counter()
        if now - last_report >= 10 or done == count:
            last_report = now
            loaded = first + done
            log(
                f"    {loaded:>12,}/{total:,} schedules  "
                f"jobs {result_rate(loaded, result.jobs_copy_s)} rows/s "
                f"{result.jobs_bytes / 1e6 / result.jobs_copy_s:6.1f} MB/s  "
                f"triggers {result_rate(loaded, result.triggers_copy_s)} rows/s  "
                f"chunk {n / (t6 - t3):,.0f} schedules/s  "
                f"elapsed {now - t_start:,.0f} s"
            )


def result_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:>9,.0f}" if seconds > 0 else "        -"


def vacuum_analyze(url: str) -> float:
    """VACUUM sets the visibility map (as autovacuum would after a bulk insert) and
    ANALYZE gives the planner real statistics; timed so the cost is on the record."""
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) triggers")
        conn.execute("ANALYZE jobs")
        return time.perf_counter() - t0


def timed_scans(
    conn: psycopg.Connection, sql: str, params: list[dict[str, Any]]
) -> tuple[list[float], list[int]]:
    seconds: list[float] = []
    rows: list[int] = []
    for p in params:
        t0 = time.perf_counter()
        got = conn.execute(sql, p).fetchall()
        seconds.append(time.perf_counter() - t0)
        rows.append(len(got))
    return seconds, rows


def explain(conn: psycopg.Connection, sql: str, params: dict[str, Any]) -> str:
    rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params, prepare=False).fetchall()
    return "\n".join(r[0] for r in rows)


def explain_buffers(conn: psycopg.Connection, sql: str, params: dict[str, Any]) -> int:
    plan = conn.execute(
        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params, prepare=False
    ).fetchone()[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


def btree_levels(conn: psycopg.Connection) -> int | None:
    """Levels of pk_triggers, root to leaf: an index-only lookup of one key after VACUUM
    touches exactly one page per level (pageinspect needs a superuser)."""
    row = conn.execute(
        "SELECT partition_id, fire_at, job_id FROM triggers WHERE partition_id = 0"
        " ORDER BY fire_at DESC LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    plan = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT partition_id FROM triggers"
        " WHERE partition_id = %s AND fire_at = %s AND job_id = %s",
        row,
        prepare=False,
    ).fetchone()[0][0]["Plan"]
    if plan["Node Type"] != "Index Only Scan" or plan.get("Heap Fetches", 0) != 0:
        return None
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


def measure_scans(
    url: str,
    result: SizeResult,
    label: str,
    args: argparse.Namespace,
    rng: random.Random,
    batched: bool,
) -> None:
    now = T0
    ahead = args.scan_ahead_s
    with psycopg.connect(url, autocommit=True) as conn:
        warm = [{"p": p, "now": now, "ahead": ahead} for p in range(PARTITION_COUNT)]
        cold_s, cold_rows = timed_scans(conn, SCAN_SQL, warm)
        cold = Latency.of(cold_s, cold_rows)
        picks = [
            {"p": rng.randrange(PARTITION_COUNT), "now": now, "ahead": ahead}
            for _ in range(args.scans)
        ]
        hot = Latency.of(*timed_scans(conn, SCAN_SQL, picks))
        result.scans[f"{label}_first_pass"] = asdict(cold)
        result.scans[label] = asdict(hot)
        log(f"    {label} scan, first pass over all {PARTITION_COUNT} partitions: {cold.text()}")
        log(f"    {label} scan, {hot.n} random partitions: {hot.text()}  rows {hot.mean_rows:.1f}")
        sample = picks[: args.buffer_samples]
        result.buffers[label] = statistics.fmean(explain_buffers(conn, SCAN_SQL, p) for p in sample)
        result.explain[label] = explain(conn, SCAN_SQL, picks[0])
        if batched:
            k = args.batch_partitions
            bparams = [
                {"ps": rng.sample(range(PARTITION_COUNT), k), "now": now, "ahead": ahead}
                for _ in range(args.batched_scans + 20)
            ]
            timed_scans(conn, BATCH_SQL, bparams[:20])  # warm-up, and prepared after five
            bat = Latency.of(*timed_scans(conn, BATCH_SQL, bparams[20:]))
            result.scans[f"{label}_batched"] = asdict(bat)
            log(
                f"    {label} batched scan ({k} partitions per statement), {bat.n} statements:"
                f" {bat.text()}  rows {bat.mean_rows:.1f}"
            )
            result.buffers[f"{label}_batched"] = statistics.fmean(
                explain_buffers(conn, BATCH_SQL, p) for p in bparams[20 : 20 + args.buffer_samples]
            )
            result.explain[f"{label}_batched"] = explain(conn, BATCH_SQL, bparams[20])


def measure_advance(url: str, result: SizeResult, args: argparse.Namespace) -> None:
    """The scheduler's per-partition transaction: lock the due triggers (SKIP LOCKED),
    advance each to its next fire, commit (a real, synchronous commit). Each partition
    once: after its advance a partition has nothing due."""
    step = timedelta(seconds=result.horizon_s)
    parts = random.Random(args.seed + 7).sample(range(PARTITION_COUNT), args.advance_txs)
    seconds: list[float] = []
    rows: list[int] = []
    with psycopg.connect(url) as conn:
        stats0 = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'triggers'"
        ).fetchone()
        conn.commit()
        for p in parts:
            t0 = time.perf_counter()
            due = conn.execute(LOCK_SQL, {"p": p, "now": T0, "ahead": args.scan_ahead_s}).fetchall()
            if due:
                conn.execute(
                    ADVANCE_SQL,
                    {
                        "ps": [r[0] for r in due],
                        "fs": [r[1] for r in due],
                        "js": [str(r[2]) for r in due],
                        "ns": [r[1] + step for r in due],
                    },
                )
            conn.commit()
            seconds.append(time.perf_counter() - t0)
            rows.append(len(due))
    time.sleep(1.5)  # a backend flushes its table counters at most once a second
    with psycopg.connect(url) as conn:
        stats1 = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'triggers'"
        ).fetchone()
    # The due scan has no lower bound on fire_at: until VACUUM, it steps over the index
    # entries the advance left dead at the front of each partition's range.
    after = [{"p": p, "now": T0, "ahead": args.scan_ahead_s} for p in parts]
    with psycopg.connect(url, autocommit=True) as conn:
        k = min(args.buffer_samples, len(after))
        first_visit = [explain_buffers(conn, SCAN_SQL, p) for p in after[:k]]
        revisit = [explain_buffers(conn, SCAN_SQL, p) for p in after[:k]]
        lat = Latency.of(*timed_scans(conn, SCAN_SQL, after[k:] or after))
    result.buffers["after_advance_first_visit"] = statistics.fmean(first_visit)
    result.buffers["after_advance_revisit"] = statistics.fmean(revisit)
    result.scans["after_advance"] = asdict(lat)
    log(
        f"    scan of an advanced partition before VACUUM: buffers first visit"
        f" {statistics.fmean(first_visit):.1f}, revisit {statistics.fmean(revisit):.1f};"
        f" {lat.text()}  rows {lat.mean_rows:.1f}"
    )
    adv = Latency.of(seconds, rows)
    result.scans["advance"] = asdict(adv)
    if stats0 and stats1:
        result.hot_updates = {
            "updated": stats1[0] - stats0[0],
            "hot": stats1[1] - stats0[1],
        }
    log(
        f"    scan-and-advance tx (FOR UPDATE SKIP LOCKED + UPDATE + COMMIT), {adv.n} partitions:"
        f" {adv.text()}  rows {adv.mean_rows:.1f}  (HOT updates {result.hot_updates})"
    )


def relation_sizes(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relname IN ('jobs', 'triggers', 'pk_jobs',"
            " 'uq_jobs_tenant_name', 'pk_triggers', 'ix_triggers_job_id')"
        ).fetchall()
        sizes = {name: int(n) for name, n in rows}
        for table in ("jobs", "triggers"):
            sizes[f"{table}_total"] = int(
                conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()[0]
            )
    return sizes


def run_size(admin: URL, size: int, args: argparse.Namespace) -> SizeResult:
    name = f"{args.db_name}_{size}"
    db = admin.set(database=name)
    url = pg_url(db)
    spike = min(args.spike, size // 2)
    steady = size - spike
    horizon_s = steady / args.rate
    lines = JobLine(args.job_bytes)
    result = SizeResult(
        size=size,
        steady_rows=steady,
        spike_rows=spike,
        horizon_s=horizon_s,
        job_line_bytes=lines.mean_bytes,
    )
    log(
        f"\n== {size:,} schedules: database {name}; {steady:,} steady fires over"
        f" [T0, T0+{horizon_s:,.0f} s) at {args.rate:,.0f}/s, {spike:,} at T0+{SPIKE_OFFSET_S} s;"
        f" jobs ~{lines.mean_bytes:.0f} B per COPY line"
    )
    recreate_database(admin, name)
    t0 = time.perf_counter()
    migrate.upgrade(db.render_as_string(hide_password=False))
    log(f"    migrated with Alembic to head in {time.perf_counter() - t0:.1f} s")

    rng = random.Random(args.seed)
    fires = np.random.default_rng(args.seed)
    steady_us = (fires.random(steady) * horizon_s * 1e6).astype(np.int64)
    spike_us = np.full(spike, SPIKE_OFFSET_S * 1_000_000, dtype=np.int64)
    try:
        with psycopg.connect(url) as conn:
            with conn.cursor() as cur, cur.copy("COPY tenants (tenant) FROM STDIN") as copy:
                copy.write("".join(f"tenant-{t:04d}\n" for t in range(TENANTS)).encode())
            conn.commit()
            log(f"    loading {steady:,} steady schedules (COPY into indexed tables)")
            t0 = time.perf_counter()
            load(conn, result, 0, steady, steady_us, lines, rng, args.chunk_rows, size)
            result.load_s += time.perf_counter() - t0
        result.vacuum_analyze_s += vacuum_analyze(url)
        log(f"    VACUUM (ANALYZE) triggers + ANALYZE jobs: {result.vacuum_analyze_s:.1f} s")
        measure_scans(url, result, "steady", args, random.Random(args.seed + 1), batched=False)

        if spike:
            with psycopg.connect(url) as conn:
                log(
                    f"    loading {spike:,} top-of-hour schedules, all due at T0+{SPIKE_OFFSET_S} s"
                )
                t0 = time.perf_counter()
                load(
                    conn,
                    result,
                    steady,
                    spike,
                    spike_us,
                    JobLine(args.job_bytes, spike=True),
                    rng,
                    args.chunk_rows,
                    size,
                )
                result.load_s += time.perf_counter() - t0
            va = vacuum_analyze(url)
            result.vacuum_analyze_s += va
            log(f"    VACUUM (ANALYZE) again: {va:.1f} s")
        measure_scans(url, result, "peak", args, random.Random(args.seed + 2), batched=True)
        with psycopg.connect(url) as conn:
            result.btree_levels = btree_levels(conn)
        result.sizes_bytes = relation_sizes(url)
        if args.advance_txs:
            measure_advance(url, result, args)
        if args.reindex:
            with psycopg.connect(url, autocommit=True) as conn:
                t0 = time.perf_counter()
                conn.execute("REINDEX TABLE triggers")
                result.reindex_triggers_s = time.perf_counter() - t0
            log(
                f"    REINDEX TABLE triggers (build both indexes from scratch): "
                f"{result.reindex_triggers_s:.1f} s"
            )
    finally:
        if not args.keep:
            drop_database(admin, name)
            log(f"    dropped {name}")
    return result


# ---------------------------------------------------------------- report


def mb(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def table(results: list[SizeResult]) -> str:
    head = (
        f"{'size':>11} | {'load sched/s':>12} | {'jobs rows/s':>11} | {'jobs MB/s':>9} |"
        f" {'trig rows/s':>11} | {'scan':>6} | {'p50 ms':>7} | {'p99 ms':>7} | {'max ms':>7} |"
        f" {'rows/scan':>9} | {'buffers':>7} | {'batch p50':>9} | {'batch p99':>9} |"
        f" {'btree lvls':>10} | {'jobs MiB':>9} | {'trig tbl+idx MiB':>16}"
    )
    out = [head, "-" * len(head)]
    for r in results:
        for label in ("steady", "peak"):
            s = r.scans.get(label)
            if s is None:
                continue
            b = r.scans.get(f"{label}_batched")
            first = label == "steady"
            out.append(
                f"{r.size:>11,} | "
                + (
                    f"{r.schedules_per_s:>12,.0f} | {r.jobs_rows_per_s:>11,.0f} |"
                    f" {r.jobs_mb_per_s:>9.1f} | {r.triggers_rows_per_s:>11,.0f} | "
                    if first
                    else f"{'':>12} | {'':>11} | {'':>9} | {'':>11} | "
                )
                + f"{label:>6} | {s['p50_ms']:>7.3f} | {s['p99_ms']:>7.3f} | {s['max_ms']:>7.2f} |"
                f" {s['mean_rows']:>9.1f} | {r.buffers.get(label, math.nan):>7.1f} | "
                + (
                    f"{b['p50_ms']:>9.2f} | {b['p99_ms']:>9.2f} | "
                    if b
                    else f"{'':>9} | {'':>9} | "
                )
                + (
                    f"{r.btree_levels if r.btree_levels is not None else '?':>10} |"
                    f" {mb(r.sizes_bytes.get('jobs_total', 0)):>9} |"
                    f" {mb(r.sizes_bytes.get('triggers_total', 0)):>16}"
                    if not first
                    else f"{'':>10} | {'':>9} | {'':>16}"
                )
            )
    return "\n".join(out)


def verdict(results: list[SizeResult]) -> list[str]:
    if len(results) < 2:
        return ["only one size: no comparison"]
    base, top = results[0], results[-1]
    factor = top.size / base.size
    lines = []
    for label in ("steady", "peak", "peak_batched", "advance"):
        a, b = base.scans.get(label), top.scans.get(label)
        if not a or not b:
            continue
        r50 = b["p50_ms"] / a["p50_ms"]
        r99 = b["p99_ms"] / a["p99_ms"]
        rows_ratio = b["mean_rows"] / a["mean_rows"] if a["mean_rows"] else math.nan
        if not 0.8 <= rows_ratio <= 1.25:
            call = f"NOT COMPARABLE: rows per scan differ ({rows_ratio:.2f}x)"
        elif r50 <= 1.5:
            call = "FLAT: stays fast"
        else:
            call = "GROWS with total size"
        lines.append(
            f"{label:>12}: p50 {a['p50_ms']:.3f} -> {b['p50_ms']:.3f} ms ({r50:.2f}x),"
            f" p99 {a['p99_ms']:.3f} -> {b['p99_ms']:.3f} ms ({r99:.2f}x);"
            f" rows {a['mean_rows']:.1f} -> {b['mean_rows']:.1f}; {factor:.0f}x the schedules:"
            f" {call}"
        )
    for label in ("steady", "peak", "peak_batched"):
        if label in base.buffers and label in top.buffers:
            lines.append(
                f"{label:>12}: buffers per scan {base.buffers[label]:.1f} ->"
                f" {top.buffers[label]:.1f}"
            )
    lines.append(
        f"{'pk_triggers':>12}: btree levels {base.btree_levels} -> {top.btree_levels}"
        f" (each extra level is one more page per scan; the rows touched do not grow)"
    )
    return lines


def plot(results: list[SizeResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    sizes = [r.size for r in results]
    for label, style in (("steady", "o-"), ("peak", "s-"), ("peak_batched", "^--")):
        for stat, alpha in (("p50_ms", 1.0), ("p99_ms", 0.6)):
            ys = [r.scans.get(label, {}).get(stat, math.nan) for r in results]
            ax.plot(sizes, ys, style, alpha=alpha, label=f"{label} {stat[:3]}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("schedules (jobs and triggers)")
    ax.set_ylabel("latency (ms, client side)")
    ax.set_title("per-partition due scan vs total schedules")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(float(s)) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("sizes: a comma-separated list like 1e6,1e7") from None
    if not sizes or any(s < 1000 for s in sizes):
        raise argparse.ArgumentTypeError("sizes: each size must be at least 1000")
    return sizes


def check_disk(args: argparse.Namespace) -> None:
    """Estimate the largest size's footprint (heap + indexes + WAL headroom) and shrink
    the job payload, loudly, when the disk holding the stack cannot take it."""
    largest = max(args.sizes)
    free = shutil.disk_usage(cronfleet_home() if cronfleet_home().exists() else "/").free
    need = largest * (args.job_bytes * 1.25 + 300) + 3e9
    log(
        f"disk: {free / 1e9:,.1f} GB free under {cronfleet_home()};"
        f" the largest size needs about {need / 1e9:,.1f} GB"
    )
    if need > free * 0.8:
        fit = int(((free * 0.8 - 3e9) / largest - 300) / 1.25)
        if fit < 200:
            raise SystemExit(f"sizes: {largest:,} schedules do not fit in {free / 1e9:.1f} GB")
        log(f"WARNING: not enough disk; job payload reduced from {args.job_bytes} to {fit} bytes")
        args.job_bytes = fit


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=parse_sizes, default=[1_000_000, 10_000_000])
    ap.add_argument("--job-bytes", type=int, default=1024, help="COPY bytes per jobs row")
    ap.add_argument("--rate", type=float, default=2000.0, help="average runs/s (steady)")
    ap.add_argument("--spike", type=int, default=50_000, help="triggers due at T0+3s")
    ap.add_argument("--scan-ahead-s", type=float, default=5.0)
    ap.add_argument("--scans", type=int, default=2000, help="timed single-partition scans")
    ap.add_argument("--batched-scans", type=int, default=500)
    ap.add_argument("--batch-partitions", type=int, default=64)
    ap.add_argument("--advance-txs", type=int, default=300, help="0 to skip; at most 1024")
    ap.add_argument("--buffer-samples", type=int, default=50, help="EXPLAINs averaged")
    ap.add_argument("--chunk-rows", type=int, default=50_000)
    ap.add_argument("--reindex", action="store_true", help="also time REINDEX TABLE triggers")
    ap.add_argument("--db-name", default="cronfleet_bench", help="prefix; _<size> appended")
    ap.add_argument("--keep", action="store_true", help="keep the scratch databases")
    ap.add_argument("--seed", type=int, default=20291231)
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--out", type=Path, help="directory for the PNG plot")
    args = ap.parse_args(argv)
    args.advance_txs = min(args.advance_txs, PARTITION_COUNT)

    command = shlex.join(["python", "benchmarks/trigger_index.py", *sys.argv[1:]])
    settings = load_settings()
    admin = make_url(settings.database_url)
    with psycopg.connect(pg_url(admin)) as conn:
        server = conn.execute("SELECT version()").fetchone()[0]
        knobs = {
            k: conn.execute(f"SHOW {k}").fetchone()[0]
            for k in ("shared_buffers", "work_mem", "max_wal_size", "synchronous_commit")
        }
    log(f"server: {server}; {knobs}")
    log(
        f"client: Python {platform.python_version()}, psycopg {psycopg.__version__}, "
        f"{os.cpu_count()} cores shared with other work"
    )
    check_disk(args)

    t_hash = time.perf_counter()
    for k in range(100_000):
        partition_of(job_id_of(k))
    hash_us = (time.perf_counter() - t_hash) * 10
    log(
        f"partition_of(job_id): {hash_us:.2f} us per id in Python"
        f" (~{hash_us * max(args.sizes) / 1e6:.0f} s for {max(args.sizes):,} ids)"
    )

    results = [run_size(admin, size, args) for size in sorted(args.sizes)]

    log("\n== EXPLAIN (ANALYZE, BUFFERS) of one scan at each size")
    for r in results:
        for label, text in r.explain.items():
            log(f"\n-- {r.size:,} schedules, {label}:\n{text}")

    log("\n== load")
    for r in results:
        log(
            f"{r.size:>11,}: {r.schedules_per_s:,.0f} schedules/s (jobs+triggers COPY + commit);"
            f" jobs {r.jobs_rows_per_s:,.0f} rows/s {r.jobs_mb_per_s:.1f} MB/s;"
            f" triggers {r.triggers_rows_per_s:,.0f} rows/s {r.triggers_mb_per_s:.1f} MB/s;"
            f" wall {r.load_s:,.0f} s incl. generating rows {r.generate_s:,.0f} s and hashing"
            f" partitions {r.hash_s:,.0f} s; VACUUM ANALYZE {r.vacuum_analyze_s:,.1f} s"
            + (f"; REINDEX triggers {r.reindex_triggers_s:.1f} s" if r.reindex_triggers_s else "")
            + f"; on disk: jobs {mb(r.sizes_bytes.get('jobs_total', 0))} MiB"
            f" ({r.sizes_bytes.get('jobs', 0) / r.size:.0f} B/row heap),"
            f" triggers {mb(r.sizes_bytes.get('triggers', 0))} MiB"
            f" + pk {mb(r.sizes_bytes.get('pk_triggers', 0))} MiB"
            f" + ix_job_id {mb(r.sizes_bytes.get('ix_triggers_job_id', 0))} MiB"
        )
    log("\n== results (latency client side over 127.0.0.1; now = T0 passed explicitly)")
    log(table(results))
    log("\n== does the scan stay fast regardless of total size? (first size is the baseline)")
    for line in verdict(results):
        log(line)
    log(f"\nreproduce: {command}")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": command,
            "server": server,
            "settings": knobs,
            "t0": T0.isoformat(),
            "args": {k: (v if not isinstance(v, Path) else str(v)) for k, v in vars(args).items()},
            "results": [
                {
                    **asdict(r),
                    "schedules_per_s": r.schedules_per_s,
                    "jobs_rows_per_s": r.jobs_rows_per_s,
                    "jobs_mb_per_s": r.jobs_mb_per_s,
                    "triggers_rows_per_s": r.triggers_rows_per_s,
                    "triggers_mb_per_s": r.triggers_mb_per_s,
                }
                for r in results
            ],
            "verdict": verdict(results),
        }
        args.json.write_text(json.dumps(payload, indent=2, default=str))
        log(f"wrote {args.json}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        png = args.out / "trigger_index.png"
        plot(results, png)
        log(f"wrote {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
