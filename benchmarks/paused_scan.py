"""What paused jobs cost a scheduler node: rows written and scan time, for 100,000 paused
every-minute jobs.

A scratch database migrated with the kit's migrations; the jobs made with the kit's
bulk create (kit.store.jobs.jobs_create_batch: `* * * * *` in UTC, no jitter, paused),
each with its first trigger; one node holding all 1,024 partitions runs the kit's scan
(kit.scheduler.scan.scan_partitions) once a second of database time (told to it, so
every run sees the same fires) for `--minutes` minutes, again at once when a scan filled
its batch and took some, as a node does. Counted: the run rows and the trigger row
versions written (pg_stat_user_tables, after the load), the runs table's size, and the
scans' time (every scan, and per minute of fires).

Run it with the kit to measure on the path (PYTHONPATH); a kit from before parked
triggers writes a skipped run per fire:
    python benchmarks/paused_scan.py --jobs 100000 --minutes 5 --json /tmp/paused.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from scratch_db import log, pg_url, server_facts
from sqlalchemy.engine import make_url

from kit.core.partitions import PARTITION_COUNT
from kit.core.policies import MisfirePolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import CronSchedule
from kit.scheduler.scan import JobViews, scan_partitions
from kit.settings import load_settings
from kit.store import scheduling as sched_sql
from kit.store.db import engine_for
from kit.store.jobs import JobSpec, jobs_create_batch
from kit.store.run_history import create_day_in
from kit.store.scratch import migrated_database

CREATED = datetime(2030, 1, 7, 0, 0, 30, tzinfo=UTC)  # first fires at 00:01
NODE = "paused-node"


def stats(url: str) -> dict[str, int]:
    time.sleep(2)  # the writers' counts reach pg_stat_user_tables within a second
    with psycopg.connect(url) as conn:
        out: dict[str, int] = {}
        for table in ("runs", "triggers"):
            row = conn.execute(
                "SELECT sum(n_tup_ins), sum(n_tup_upd), sum(n_tup_del) FROM pg_stat_user_tables"
                " WHERE relname = %s OR relname LIKE %s",
                (table, f"{table}\\_%"),
            ).fetchone()
            out[f"{table}_inserted"], out[f"{table}_updated"], out[f"{table}_deleted"] = (
                int(v or 0) for v in row
            )
        out["runs_rows"] = int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])
        out["runs_bytes"] = int(
            conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits"
                " WHERE inhparent = 'runs'::regclass"
            ).fetchone()[0]
        )
    return out


def since(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def run(args: argparse.Namespace) -> dict[str, Any]:
    admin = make_url(load_settings().database_url)
    with migrated_database(admin, args.db_name) as db:
        url = pg_url(db)
        engine = engine_for(db.render_as_string(hide_password=False), pool_size=2)
        try:
            with engine.begin() as conn:
                create_day_in(conn, CREATED.date())
            spec = JobSpec(
                name="",
                schedule=CronSchedule("* * * * *", "UTC"),
                task={"type": "noop"},
                retry=RetryPolicy().to_dict(),
                misfire=MisfirePolicy().to_dict(),
                paused=True,
            )
            t0 = time.perf_counter()
            for start in range(0, args.jobs, 20_000):
                specs = [
                    JobSpec(**{**spec.__dict__, "name": f"paused-{i:07d}"})
                    for i in range(start, min(args.jobs, start + 20_000))
                ]
                jobs_create_batch(engine, "acme", specs, now=CREATED)
            load_s = time.perf_counter() - t0
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM (ANALYZE) triggers")
                conn.execute("VACUUM (ANALYZE) jobs")
            with engine.begin() as conn:
                epochs = sched_sql.leases_acquire(
                    conn, NODE, range(PARTITION_COUNT), 24 * 3_600_000
                )
            before = stats(url)
            views = JobViews()
            scans: list[dict[str, Any]] = []
            first = CREATED.replace(second=0) + timedelta(seconds=60 - 10)  # 00:00:50
            for second in range(args.minutes * 60):
                at = first + timedelta(seconds=second)
                while True:
                    w0 = time.perf_counter()
                    r = scan_partitions(
                        engine, NODE, epochs, scan_ahead_ms=10_000, now=at, jobs=views
                    )
                    ms = (time.perf_counter() - w0) * 1000
                    scans.append(
                        {"second": second, "ms": ms, "triggers": r.triggers, "taken": r.taken}
                    )
                    if not r.rescan:
                        break
            after = stats(url)
        finally:
            engine.dispose()
    per_minute = [
        sum(s["ms"] for s in scans if s["second"] // 60 == m) for m in range(args.minutes)
    ]
    written = since(after, before)
    return {
        "jobs": args.jobs,
        "minutes": args.minutes,
        "load_s": load_s,
        "scans": len(scans),
        "scan_ms_total": sum(s["ms"] for s in scans),
        "scan_ms_per_minute": per_minute,
        "scan_ms_max": max(s["ms"] for s in scans),
        "scan_ms_median": statistics.median(s["ms"] for s in scans),
        "triggers_read": sum(s["triggers"] for s in scans),
        **written,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--minutes", type=int, default=5, help="minutes of fires scanned")
    ap.add_argument("--db-name", default="cronfleet_paused")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    server, knobs = server_facts(make_url(load_settings().database_url))
    log(f"server: {server}; {knobs}")
    out = run(args)
    out["command"] = " ".join(["python", "benchmarks/paused_scan.py", *sys.argv[1:]])
    log(
        f"{out['jobs']:,} paused every-minute jobs, {out['minutes']} minutes of fires:"
        f" {out['runs_rows']:,} run rows ({out['runs_bytes'] / 2**20:,.1f} MiB), trigger"
        f" rows inserted/updated/deleted {out['triggers_inserted']:,} /"
        f" {out['triggers_updated']:,} / {out['triggers_deleted']:,};"
        f" {out['scans']} scans, {out['scan_ms_total'] / 1000:,.2f} s in all"
        f" (per minute {[round(x / 1000, 2) for x in out['scan_ms_per_minute']]} s),"
        f" median {out['scan_ms_median']:.1f} ms, max {out['scan_ms_max']:,.0f} ms;"
        f" {out['triggers_read']:,} trigger rows read"
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
