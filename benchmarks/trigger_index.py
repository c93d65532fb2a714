"""Benchmark of the kit's own due scan: does one scheduler node's scan-and-write stay fast
as the number of schedules grows (1 million, 10 million)?

What is timed is `kit.scheduler.scan.scan_partitions`, the function a scheduler node
calls once a second: it locks the node's partition leases, reads the due triggers with
the kit's query (`kit.store.scheduling.triggers_due`: the LEFT JOIN to `jobs`, ORDER BY
fire_at, LIMIT 20,000, FOR UPDATE OF t SKIP LOCKED), decides them with kit.core.trigger,
counts active runs for overlap-limited jobs, inserts the runs, deletes the triggers,
inserts each job's next trigger and commits. One node holds all 1024 partitions (a
single-node fleet: the whole fire rate goes through one scan).

Each size gets a fresh scratch database migrated with the project's own Alembic
migrations. Jobs (~1 KB each, real cron schedules, one in three overlap-limited) and
their triggers are bulk-loaded with COPY. Steady state: the trigger table holds each
schedule's next fire; at `--rate` runs/s the steady fires spread uniformly over
[T0, T0 + steady/rate). Three top-of-hour spikes of `--spike` schedules each fire at one
second, one in the middle of each series. The scan runs with the kit's defaults
(scan-ahead 10 s, batch 20,000) at now = T0, T0+1 s, ... (the database is told the time,
so the scans see the same due rows on every machine); a scan that filled its batch is
repeated at the same second, as the node does.

Judged on p99 over every scan of each of three series (each series reported), steady
seconds and spike seconds apart (a spike is taken at two seconds: the one the scan-ahead
window first reaches it, and the one its overlap-limited third is let in, 1 s before its
fire); the smallest size given is the baseline, measured in the
same run. Where the time goes: the scan's SQL calls are timed one by one.

Run (1 M and its baseline, 300 k):  python benchmarks/trigger_index.py --sizes 3e5,1e6 \
    --json out/trigger_index.json --out out/trigger_index
10 M in two steps, the load not being a measurement (about 25 min and ~19 GB of disk):
    python benchmarks/trigger_index.py --sizes 3e5,1e6,1e7 --phase load
    python benchmarks/trigger_index.py --sizes 3e5,1e6,1e7 --phase scan --json /tmp/ti.json
Quick check:  python benchmarks/trigger_index.py --sizes 1e4,1e5 --series-s 5
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
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from scan_clock import Publishing, WallClock
from scratch_db import drop_database, log, pg_url, recreate_database, server_facts
from sqlalchemy.engine import URL, make_url

from kit.core.defaults import SCAN_AHEAD_MS
from kit.core.partitions import PARTITION_COUNT, partition_of
from kit.core.trigger import OVERLAP_HORIZON_MS
from kit.scheduler.scan import JobViews, scan_partitions
from kit.settings import cronfleet_home, load_settings
from kit.store import migrate
from kit.store import scheduling as sched_sql
from kit.store.db import engine_for
from sim.calibrate import SCAN_CALLS

# The first steady fire; the spikes fire mid-series (spike_fire_s).
T0 = datetime(2029, 12, 31, 23, 59, 57, tzinfo=UTC)
TENANTS = 1000
CREATED_AT = "2029-12-01 00:00:00+00"

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
OVERLAPS = ("allow", "allow", "forbid")  # a variant's overlap policy (variant % 3)


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
                {"max_attempts": 3 + k % 5, "base_s": 1.0, "cap_s": 300.0, "jitter": "full"}
            )
            misfire = json.dumps(
                {"kind": ("run_once", "run_all", "skip_late")[k % 3], "deadline_s": 300}
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
                    f"\t{retry}\t{60 * (1 + k % 30)}\t{OVERLAPS[k % 3]}"
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

    @staticmethod
    def limits(i: int) -> bool:
        """Whether job `i` limits overlap (its variant's overlap is `forbid`)."""
        return OVERLAPS[i % 48 % 3] != "allow"


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
    scans: list[Any] = field(default_factory=list)  # Scan, one per scan_partitions call
    stalled_full_scans: int = 0  # full batches of which nothing could be taken yet
    spikes: list[Any] = field(default_factory=list)  # spike_outcomes
    sizes_bytes: dict[str, int] = field(default_factory=dict)

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
    """COPY `count` jobs and their triggers, one transaction per chunk. A trigger says
    whether its job limits overlap (one job in three: `forbid`), as the kit writes it,
    when the schema has the column (an older kit's has not)."""
    fire_text = FireTimeText()
    flags = has_column(conn, "triggers", "limits_overlap")
    flag_col = ", limits_overlap" if flags else ""
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
            [
                f"{parts[k]}\t{fire_text(offs[k])}\t{ids[k]}\t1\tschedule\t1"
                + (("\tt" if lines.limits(base + k) else "\tf") if flags else "")
                + "\n"
                for k in range(n)
            ]
        ).encode()
        t3 = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy(f"COPY jobs ({JOB_COLUMNS}) FROM STDIN") as copy:
                copy.write(jobs_buf)
            t4 = time.perf_counter()
            with cur.copy(
                "COPY triggers (partition_id, fire_at, job_id, job_version, kind, attempt"
                f"{flag_col}) FROM STDIN"
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


def has_column(conn: psycopg.Connection, table: str, column: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
        (table, column),
    ).fetchone()
    return row is not None


def result_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:>9,.0f}" if seconds > 0 else "        -"


def vacuum_analyze(url: str) -> float:
    """VACUUM sets the visibility map and the rows' hint bits (as autovacuum would after
    a bulk insert: without it, every job row's first read by a scan dirtied its page) and
    ANALYZE gives the planner real statistics; timed so the cost is on the record."""
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) triggers")
        conn.execute("VACUUM (ANALYZE) jobs")
        return time.perf_counter() - t0


# ---------------------------------------------------------------- the kit's scan, timed

SQL_CALLS = SCAN_CALLS  # the store calls of one scan, as `cronfleet calibrate` times them


class SqlTimer:
    """Wraps the store functions the scan calls (kit.store.scheduling) to time each."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = dict.fromkeys(SQL_CALLS, 0.0)
        self._orig: dict[str, Any] = {}

    def __enter__(self) -> SqlTimer:
        for name in SQL_CALLS:
            fn = getattr(sched_sql, name, None)
            if fn is None:  # a call this kit does not have (an older scan, for a baseline)
                continue
            self._orig[name] = fn

            def timed(*a: Any, _fn: Any = fn, _name: str = name, **kw: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **kw)
                finally:
                    self.spent[_name] += time.perf_counter() - t0

            setattr(sched_sql, name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, fn in self._orig.items():
            setattr(sched_sql, name, fn)

    def take(self) -> dict[str, float]:
        out = dict(self.spent)
        self.spent = dict.fromkeys(SQL_CALLS, 0.0)
        return out


@dataclass
class Scan:
    series: int
    second: int
    kind: str  # steady | spike | catch-up (the warm-up that takes the first window)
    ms: float
    triggers: int
    held: int
    full: bool
    sql_ms: dict[str, float]
    late_ms: float = 0.0  # how long after its whole second the scan began
    cpu_ms: float = 0.0  # the node's: the scanning thread's CPU time over the scan
    db_cpu_ms: float = 0.0  # the database's: its backends' CPU time over the scan


class BackendCpu:
    """CPU time (user + system) of the PostgreSQL backends serving one database, read
    from /proc (the database runs on this machine): the database's own time per fire,
    not the client's wait, which includes the node's work done while a COPY runs.
    Clock ticks (10 ms): summed over scans of thousands of fires. Returns 0 where /proc
    does not show the server's processes."""

    def __init__(self, user: str, database: str) -> None:
        self.tag = f"postgres: {user} {database} ".encode()
        self.tick_s = 1 / os.sysconf("SC_CLK_TCK")

    def seconds(self) -> float:
        total = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if not f.read(len(self.tag)).startswith(self.tag):
                        continue
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total * self.tick_s


def own_all_partitions(engine: Any, node: str) -> dict[int, int]:
    with engine.begin() as conn:
        return sched_sql.leases_acquire(conn, node, range(PARTITION_COUNT), 24 * 3_600_000)


def scan_series(url: str, result: SizeResult, args: argparse.Namespace) -> None:
    """The warm-up catch-up, then `--series` series of `--series-s` seconds on the wall
    clock (scan_clock.WallClock): a scan at each whole second at the database time it
    starts, again at once when it filled its batch and took some, the next at the next
    whole second after it ends; what each commits published at once (scan_clock.
    Publishing, unless --no-publish)."""
    engine = engine_for(url.replace("postgresql://", "postgresql+psycopg://", 1), pool_size=2)
    node = "bench-node"
    jobs = JobViews()
    publishing = None if args.no_publish else Publishing(load_settings().kafka_bootstrap)
    target = make_url(url)
    backends = BackendCpu(target.username or "", target.database or "")
    try:
        epochs = own_all_partitions(engine, node)
        assert len(epochs) == PARTITION_COUNT, len(epochs)
        with SqlTimer() as timer:

            def scan(series: int, second: int, kind: str, at: datetime, late_ms: float) -> bool:
                db0 = backends.seconds()
                t0, c0 = time.perf_counter(), time.thread_time()
                r = scan_partitions(
                    engine, node, epochs, scan_ahead_ms=args.scan_ahead_ms, now=at, jobs=jobs
                )
                committed = time.time()
                ms = (time.perf_counter() - t0) * 1000
                cpu_ms = (time.thread_time() - c0) * 1000
                db_cpu_ms = (backends.seconds() - db0) * 1000
                sql_ms = {k: v * 1000 for k, v in timer.take().items() if v}
                result.scans.append(
                    Scan(
                        series,
                        second,
                        kind,
                        ms,
                        r.triggers,
                        len(r.held),
                        r.full,
                        sql_ms,
                        late_ms,
                        cpu_ms,
                        db_cpu_ms,
                    )
                )
                if publishing is not None:
                    publishing.put(r.held, committed)
                progress = bool(r.held or r.skipped or r.dropped or getattr(r, "parked", 0))
                if r.full and not progress:
                    # A full batch of which nothing could be taken: triggers of
                    # overlap-limited jobs not yet within their 1 s horizon fill the LIMIT.
                    # The node would scan again at once until its clock moves on (a busy
                    # loop, reported); here it waits for the next second.
                    result.stalled_full_scans += 1
                return r.full and progress

            # catch up the first window (a node that just took its partitions), untimed
            while scan(0, -1, "catch-up", T0 - timedelta(seconds=1), 0.0):
                pass
            spikes = set().union(*(spike_seconds(s, args) for s in range(1, args.series + 1)))
            clock = WallClock(T0)
            total = args.series * args.series_s
            second = 0
            while second < total:
                clock.wait_for(second)
                series = second // args.series_s + 1
                kind = "spike" if second in spikes else "steady"
                late_ms = (clock.elapsed_s() - second) * 1000
                while scan(series, second, kind, clock.now(), late_ms):
                    kind = "spike"  # the same second again: the spike's rest
                    late_ms = (clock.elapsed_s() - second) * 1000
                second = max(second + 1, clock.next_second())
            for s in range(1, args.series + 1):
                done = [x for x in result.scans if x.series == s]
                steady = [x.ms for x in done if x.kind == "steady"]
                log(
                    f"    series {s}: {len(done)} scans, steady p50 {pct(steady, 50):.1f} ms"
                    f" p99 {pct(steady, 99):.1f} ms max {max(steady, default=math.nan):.1f} ms;"
                    f" spike {[round(x.ms) for x in done if x.kind == 'spike']} ms"
                    f" for {[x.triggers for x in done if x.kind == 'spike']} rows"
                )
        if publishing is not None:
            publishing.close()
            per = result.spike_rows // args.series
            result.spikes = spike_outcomes(publishing.records, clock, per, args)
            for o in result.spikes:
                if not o["runs"]:
                    log(f"    spike of series {o['series']}: none of {o['missing']:,} published")
                    continue
                log(
                    f"    spike of series {o['series']}: {o['runs']:,} runs, last committed"
                    f" {o['last_commit_lead_ms']:,.0f} ms and last acknowledged"
                    f" {o['last_ack_lead_ms']:,.0f} ms before its second;"
                    f" {o['late_inserted']} inserted late, {o['late_published']} published late,"
                    f" {o['missing']} not published"
                )
    finally:
        engine.dispose()


def spike_outcomes(
    records: list[Any], clock: WallClock, per_spike: int, args: argparse.Namespace
) -> list[dict]:
    """Per spike: its runs (those scheduled at its second; `per_spike` expected), how
    long before that second the last was committed and the last acknowledged (negative:
    after), and how many were committed or acknowledged after it, never acknowledged,
    or not published at all."""
    out = []
    for s in range(1, args.series + 1):
        due_ms = clock.t0_ms + spike_fire_s(s, args) * 1000
        due_s = clock.wall_of(due_ms)
        mine = [r for r in records if r.scheduled_at_ms == due_ms]
        if not mine:
            out.append({"series": s, "runs": 0, "missing": per_spike})
            continue
        acked = [r.acked_s for r in mine if r.acked_s is not None]
        out.append(
            {
                "series": s,
                "runs": len(mine),
                "last_commit_lead_ms": (due_s - max(r.committed_s for r in mine)) * 1000,
                "last_ack_lead_ms": (due_s - max(acked)) * 1000 if acked else math.nan,
                "late_inserted": sum(r.committed_s > due_s for r in mine),
                "late_published": sum(r.acked_s is None or r.acked_s > due_s for r in mine),
                "missing": max(0, per_spike - len(mine)),
            }
        )
    return out


def spike_fire_s(series: int, args: argparse.Namespace) -> int:
    """The second (after T0) at which series `series`' spike fires: mid-series."""
    return (series - 1) * args.series_s + args.series_s // 2 + args.scan_ahead_ms // 1000


def spike_enters_s(series: int, args: argparse.Namespace) -> int:
    return spike_fire_s(series, args) - args.scan_ahead_ms // 1000


def spike_seconds(series: int, args: argparse.Namespace) -> set[int]:
    """The seconds whose scans take the spike: the one its window first reaches, and the
    one the overlap-limited third (forbid) is held back to (kit.core.trigger.held_back:
    within OVERLAP_HORIZON_MS of its fire). Counting the second one as steady made each
    series' "steady" p99 the spike's rest (~16,700 rows in one scan)."""
    fire = spike_fire_s(series, args)
    return {spike_enters_s(series, args), fire - math.ceil(OVERLAP_HORIZON_MS / 1000)}


def code_version() -> str:
    """The commit the kit's code comes from (and whether the tree differs from it): a
    figure is only comparable with one measured on the same code."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "kit"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" with local changes to kit/" if dirty else "")


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def relation_sizes(url: str) -> dict[str, int]:
    names = ("jobs", "triggers", "runs", "pk_triggers", "ix_triggers_job_id")
    with psycopg.connect(url) as conn:
        out = {}
        for n in names:
            row = conn.execute("SELECT pg_relation_size(to_regclass(%s))", (n,)).fetchone()
            out[n] = int(row[0] or 0)
        out["jobs_total"] = int(conn.execute("SELECT pg_total_relation_size('jobs')").fetchone()[0])
    return out


def load_size(admin: URL, size: int, args: argparse.Namespace, result: SizeResult) -> None:
    name = f"{args.db_name}_{size}"
    db = admin.set(database=name)
    url = pg_url(db)
    lines = JobLine(args.job_bytes)
    log(
        f"\n== {size:,} schedules: database {name}; {result.steady_rows:,} steady fires over"
        f" [T0, T0+{result.horizon_s:,.0f} s) at {args.rate:,.0f}/s, {args.series} spikes of"
        f" {result.spike_rows // args.series:,}; jobs ~{lines.mean_bytes:.0f} B per COPY line"
    )
    recreate_database(admin, name)
    t0 = time.perf_counter()
    migrate.upgrade(db.render_as_string(hide_password=False))
    log(f"    migrated with Alembic to head in {time.perf_counter() - t0:.1f} s")
    rng = random.Random(args.seed)
    fires = np.random.default_rng(args.seed)
    steady_us = (fires.random(result.steady_rows) * result.horizon_s * 1e6).astype(np.int64)
    per = result.spike_rows // args.series
    spike_us = np.concatenate(
        [
            np.full(per, spike_fire_s(s, args) * 1_000_000, dtype=np.int64)
            for s in range(1, args.series + 1)
        ]
    )
    with psycopg.connect(url) as conn:
        with conn.cursor() as cur, cur.copy("COPY tenants (tenant) FROM STDIN") as copy:
            copy.write("".join(f"tenant-{t:04d}\n" for t in range(TENANTS)).encode())
        conn.commit()
        t0 = time.perf_counter()
        load(conn, result, 0, result.steady_rows, steady_us, lines, rng, args.chunk_rows, size)
        if per:
            spike_lines = JobLine(args.job_bytes, spike=True)
            load(
                conn,
                result,
                result.steady_rows,
                per * args.series,
                spike_us,
                spike_lines,
                rng,
                args.chunk_rows,
                size,
            )
        result.load_s += time.perf_counter() - t0
    result.vacuum_analyze_s += vacuum_analyze(url)
    log(f"    loaded in {result.load_s:,.0f} s; VACUUM (ANALYZE): {result.vacuum_analyze_s:.1f} s")


def copy_database(admin: URL, template: str, name: str) -> float:
    """A copy of a loaded database (file by file: its WAL would be the whole database)."""
    drop_database(admin, name)
    t0 = time.perf_counter()
    with psycopg.connect(pg_url(admin), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
    return time.perf_counter() - t0


def run_size(admin: URL, size: int, args: argparse.Namespace) -> SizeResult:
    name = f"{args.db_name}_{size}"
    if args.phase == "scan" and args.from_template:
        template, name = name, f"{name}_run"
        log(f"    copied {template} to {name} in {copy_database(admin, template, name):.0f} s")
    url = pg_url(admin.set(database=name))
    spike = min(args.spike * args.series, size // 2) // args.series * args.series
    steady = size - spike
    result = SizeResult(
        size=size,
        steady_rows=steady,
        spike_rows=spike,
        horizon_s=steady / args.rate,
        job_line_bytes=JobLine(args.job_bytes).mean_bytes,
    )
    dropped = False
    try:
        if args.phase in ("all", "load"):
            load_size(admin, size, args, result)
        if args.phase in ("all", "scan"):
            log(f"\n== {size:,} schedules: scanning {name}")
            scan_series(url, result, args)
            result.sizes_bytes = relation_sizes(url)
    finally:
        if args.phase != "load" and not args.keep:
            drop_database(admin, name)
            dropped = True
            log(f"    dropped {name}")
    if not dropped:
        log(f"    kept {name} (drop it with --phase scan, or DROP DATABASE)")
    return result


# ---------------------------------------------------------------- report


def mb(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def series_rows(r: SizeResult, args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for s in range(1, args.series + 1):
        done = [x for x in r.scans if x.series == s]
        steady = [x for x in done if x.kind == "steady"]
        spikes = [x for x in done if x.kind == "spike"]
        ms = [x.ms for x in steady]
        names = sorted({k for x in steady for k in x.sql_ms})
        sql = {k: sum(x.sql_ms.get(k, 0.0) for x in steady) / max(len(steady), 1) for k in names}
        outcome = next((o for o in r.spikes if o["series"] == s), {})
        out.append(
            {
                **{f"spike_{k}": v for k, v in outcome.items() if k != "series"},
                "size": r.size,
                "series": s,
                "scans": len(steady),
                "rows_per_scan": statistics.fmean(x.triggers for x in steady) if steady else 0,
                "runs_per_scan": statistics.fmean(x.held for x in steady) if steady else 0,
                "p50_ms": pct(ms, 50),
                "p99_ms": pct(ms, 99),
                "max_ms": max(ms) if ms else math.nan,
                "spike_ms": sum(x.ms for x in spikes),
                "spike_scans": len(spikes),
                "spike_rows": sum(x.triggers for x in spikes),
                "sql_ms_mean": sql,
                "seconds_skipped": args.series_s - len({x.second for x in done}),
                **per_fire(done),
            }
        )
    return out


def per_fire(scans: list[Scan]) -> dict[str, float]:
    """The node's CPU and the database's CPU per fired run, us: over the steady scans
    and over the spike's scans (totals over fires, the scan's fixed cost included), and
    the slope over all the series' scans (a least-squares line of CPU against fires:
    the fixed cost apart, as `cronfleet calibrate` takes it)."""
    out: dict[str, float] = {}
    for name, group in (
        ("steady", [x for x in scans if x.kind == "steady"]),
        ("spike", [x for x in scans if x.kind == "spike"]),
    ):
        fires = sum(x.held for x in group)
        out[f"{name}_cpu_us_per_fire"] = (
            sum(x.cpu_ms for x in group) * 1000 / fires if fires else math.nan
        )
        out[f"{name}_db_cpu_us_per_fire"] = (
            sum(x.db_cpu_ms for x in group) * 1000 / fires if fires else math.nan
        )
    timed = [x for x in scans if x.kind in ("steady", "spike")]
    if len({x.held for x in timed}) >= 2:
        held = np.array([x.held for x in timed], dtype=float)
        for key, attr in (
            ("slope_cpu_us_per_fire", "cpu_ms"),
            ("slope_db_cpu_us_per_fire", "db_cpu_ms"),
        ):
            slope, fixed = np.polyfit(held, [getattr(x, attr) for x in timed], 1)
            out[key] = float(slope) * 1000
            out[key.replace("slope", "fixed").replace("_us_per_fire", "_ms")] = float(fixed)
    return out


RUN_CALLS = ("runs_insert", "runs_insert_fired")
TRIGGER_CALLS = ("triggers_delete", "triggers_insert", "triggers_advance", "triggers_park")


def sql_groups(ms: dict[str, float]) -> dict[str, float]:
    """A scan's store calls in four groups (older scans name some calls differently)."""
    due = ms.get("triggers_due", 0.0)
    runs = sum(ms.get(k, 0.0) for k in RUN_CALLS)
    trig = sum(ms.get(k, 0.0) for k in TRIGGER_CALLS)
    return {
        "due": due,
        "runs": runs,
        "triggers": trig,
        "other": sum(ms.values()) - due - runs - trig,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| schedules | series | steady scans | rows / scan | runs / scan | p50 ms | p99 ms |"
        " max ms | spike: scans, rows, total ms | spike: last commit / last ack before its"
        " second, ms; late | SQL: due / runs insert / triggers moved / other ms (mean) |"
        " us per fire, node CPU / database CPU: steady; spike; slope |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |"
    )
    lines = [head]
    for x in rows:
        q = sql_groups(x["sql_ms_mean"])
        lines.append(
            f"| {x['size']:,} | {x['series']} | {x['scans']} | {x['rows_per_scan']:,.0f} |"
            f" {x['runs_per_scan']:,.0f} | {x['p50_ms']:.1f} | **{x['p99_ms']:.1f}** |"
            f" {x['max_ms']:.1f} | {x['spike_scans']}, {x['spike_rows']:,},"
            f" {x['spike_ms']:,.0f} | {spike_text(x)} |"
            f" {q['due']:.1f} / {q['runs']:.1f} / {q['triggers']:.1f} / {q['other']:.1f} |"
            f" {fire_text(x)} |"
        )
    return "\n".join(lines)


def fire_text(x: dict[str, Any]) -> str:
    def pair(kind: str) -> str:
        cpu, db = (
            x.get(f"{kind}_cpu_us_per_fire", math.nan),
            x.get(f"{kind}_db_cpu_us_per_fire", math.nan),
        )
        return f"{cpu:.1f} / {db:.1f}"

    return f"{pair('steady')}; {pair('spike')}; {pair('slope')}"


def spike_text(x: dict[str, Any]) -> str:
    if "spike_runs" not in x:
        return "not published"
    if not x["spike_runs"]:
        return f"none of {x['spike_missing']:,} published"
    late = x["spike_late_inserted"] + x["spike_late_published"] + x["spike_missing"]
    return (
        f"{x['spike_last_commit_lead_ms']:,.0f} / {x['spike_last_ack_lead_ms']:,.0f};"
        f" late: {x['spike_late_inserted']:,} inserted, {x['spike_late_published']:,}"
        f" published, {x['spike_missing']:,} never" + ("" if late else " (0 late)")
    )


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    sizes = sorted({x["size"] for x in rows})
    if len(sizes) < 2:
        return ["one size only: no comparison"]
    base = [x for x in rows if x["size"] == sizes[0]]
    out = []
    for size in sizes[1:]:
        mine = [x for x in rows if x["size"] == size]
        for b, m in zip(base, mine, strict=False):
            out.append(
                f"{size:,} vs {sizes[0]:,} series {m['series']}: steady p99"
                f" {m['p99_ms']:.1f} / {b['p99_ms']:.1f} ms = {m['p99_ms'] / b['p99_ms']:.2f}x,"
                f" due query {m['sql_ms_mean'].get('triggers_due', 0):.1f} /"
                f" {b['sql_ms_mean'].get('triggers_due', 0):.1f} ms, spike"
                f" {m['spike_ms']:,.0f} / {b['spike_ms']:,.0f} ms"
            )
    return out


def plot(results: list[SizeResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for r in results:
        for s in sorted({x.series for x in r.scans if x.series}):
            xs = [x for x in r.scans if x.series == s]
            ax.plot(
                [x.second for x in xs],
                [x.ms for x in xs],
                ".-",
                lw=0.8,
                label=f"{r.size:,} schedules, series {s}",
            )
    ax.set_yscale("log")
    ax.set_xlabel("second after T0 (one scan per second; spikes mid-series)")
    ax.set_ylabel("scan_partitions wall time, ms")
    ax.set_title("The kit's due scan and write, one node holding all 1024 partitions")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_runs(paths: list[Path], path: Path) -> None:
    """Every steady scan of the runs' JSON (`--json`), one line a run and series: a
    series of runs (before and after alternated) drawn as one plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for run in paths:
        scans = json.loads(run.read_text())["scans"]
        for s in sorted({x["series"] for x in scans if x["series"]}):
            xs = [x for x in scans if x["series"] == s and x["kind"] == "steady"]
            if xs:
                before = "before" in run.stem
                ax.plot(
                    [x["second"] for x in xs],
                    [x["ms"] for x in xs],
                    "x--" if before else ".-",
                    lw=0.8,
                    color="k" if before else None,
                    label=f"{run.stem}, series {s}",
                )
    ax.axhline(250, color="tab:gray", lw=1.0, ls=":", label="target p99 250 ms")
    ax.set_yscale("log")
    ax.set_xlabel("second of the run (one scan a second; series one after the other)")
    ax.set_ylabel("steady scan wall time, ms")
    ax.set_title("Steady scans of ~2,000 cron fires, one node holding all 1024 partitions")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(float(s)) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("sizes: a comma-separated list like 1e6,1e7") from None
    if not sizes or any(s < 1000 for s in sizes):
        raise argparse.ArgumentTypeError("sizes: each size must be at least 1000")
    return sizes


def check_disk(args: argparse.Namespace) -> None:
    """Estimate the largest size's footprint (heap + indexes + WAL headroom) and refuse,
    loudly, when the disk holding the stack cannot take it."""
    largest = max(args.sizes)
    free = shutil.disk_usage(cronfleet_home() if cronfleet_home().exists() else "/").free
    need = largest * (args.job_bytes * 1.25 + 300) + 3e9
    log(
        f"disk: {free / 1e9:,.1f} GB free under {cronfleet_home()};"
        f" the largest size needs about {need / 1e9:,.1f} GB"
    )
    if need > free * 0.8 and args.phase != "scan":
        raise SystemExit(f"sizes: {largest:,} schedules do not fit in {free / 1e9:.1f} GB")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=parse_sizes, default=[300_000, 1_000_000])
    ap.add_argument(
        "--phase",
        choices=("all", "load", "scan"),
        default="all",
        help="load: create and keep the databases; scan: time kept ones",
    )
    ap.add_argument("--job-bytes", type=int, default=1024, help="COPY bytes per jobs row")
    ap.add_argument("--rate", type=float, default=2000.0, help="average runs/s (steady)")
    ap.add_argument("--spike", type=int, default=50_000, help="schedules per spike")
    ap.add_argument("--series", type=int, default=3)
    ap.add_argument("--series-s", type=int, default=20, help="scans (seconds) per series")
    ap.add_argument("--scan-ahead-ms", type=int, default=SCAN_AHEAD_MS)
    ap.add_argument("--chunk-rows", type=int, default=50_000)
    ap.add_argument("--db-name", default="cronfleet_scan", help="prefix; _<size> appended")
    ap.add_argument("--keep", action="store_true", help="keep the scratch databases")
    ap.add_argument(
        "--from-template",
        action="store_true",
        help="scan: scan a copy of each kept database (it stays as loaded, for the next run)",
    )
    ap.add_argument(
        "--no-publish", action="store_true", help="do not publish what the scans commit"
    )
    ap.add_argument("--seed", type=int, default=20291231)
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--out", type=Path, help="directory for the PNG plot")
    ap.add_argument(
        "--plot",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="only draw the steady scans of these runs' JSON into --out (no database)",
    )
    args = ap.parse_args(argv)
    if args.plot:
        if args.out is None:
            ap.error("--plot: say where with --out DIR")
        args.out.mkdir(parents=True, exist_ok=True)
        plot_runs(args.plot, args.out / "trigger_index.png")
        log(f"wrote {args.out / 'trigger_index.png'}")
        return 0

    command = shlex.join(["python", "benchmarks/trigger_index.py", *sys.argv[1:]])
    settings = load_settings()
    admin = make_url(settings.database_url)
    server, knobs = server_facts(admin)
    log(f"server: {server}; {knobs}")
    log(
        f"client: Python {platform.python_version()}, psycopg {psycopg.__version__}, "
        f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at start;"
        f" code {code_version()}"
    )
    check_disk(args)
    results = [run_size(admin, size, args) for size in sorted(args.sizes)]
    if args.phase == "load":
        return 0
    rows = [x for r in results for x in series_rows(r, args)]
    log("\n== every series (wall time of scan_partitions, client side over 127.0.0.1)")
    log(table(rows))
    log("\n== against the baseline (the first size), series by series")
    for line in verdict(rows):
        log(line)
    for r in results:
        log(
            f"{r.size:,}: full batches of which nothing could be taken yet (forbid/queue jobs"
            f" outside their 1 s horizon filling the LIMIT): {r.stalled_full_scans}"
        )
    log(f"\nload average {os.getloadavg()[0]:.1f} at the end\nreproduce: {command}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": command,
            "code": code_version(),
            "server": server,
            "settings": knobs,
            "t0": T0.isoformat(),
            "args": {k: (v if not isinstance(v, Path) else str(v)) for k, v in vars(args).items()},
            "series": rows,
            "sizes": [{k: v for k, v in asdict(r).items() if k != "scans"} for r in results],
            "scans": [{"size": r.size, **asdict(x)} for r in results for x in r.scans],
            "verdict": verdict(rows),
        }
        args.json.write_text(json.dumps(payload, indent=1, default=str))
        log(f"wrote {args.json}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        png = args.out / "trigger_index.png"
        plot(results, png)
        log(f"wrote {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
