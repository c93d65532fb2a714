"""The jobs mix's tail against PostgreSQL's WAL settings (issue 16, fourth round).

Round 3 found the jobs mix's worst-route p99 set by a few 100-300 ms stalls per run, every
commit in flight waiting for the WAL to reach the disk. This benchmark asks whether the
WAL's volume is the lever: it runs api_speed's jobs mix against one `cronfleet api` of
this tree, alternating PostgreSQL settings (arms) run by run in the same series, each run
starting from a CHECKPOINT (so each starts with the same full-page images owed), and
records per run the mix's figures and what PostgreSQL wrote and waited for
(`pg_stat_wal`: bytes, full-page images, fsyncs and their time; checkpoints).

    python benchmarks/api_wal.py --rounds 3 --json OUT.json

Settings are changed with ALTER SYSTEM and a reload (every arm's settings are reloadable)
and reset at the end; `track_wal_io_timing` is on for every arm.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
import api_speed

MIX = "jobs mix"
ARMS: dict[str, dict[str, str]] = {
    "stack as it is": {},
    "wal_compression=lz4": {"wal_compression": "lz4"},
}
SETTINGS = sorted({name for arm in ARMS.values() for name in arm} | {"track_wal_io_timing"})

WAL_SQL = """
SELECT w.wal_bytes, w.wal_fpi, w.wal_records, w.wal_sync, w.wal_sync_time,
       w.wal_write_time, b.checkpoints_timed + b.checkpoints_req
FROM pg_stat_wal w, pg_stat_bgwriter b"""
WAL_FIELDS = ("bytes", "fpi", "records", "syncs", "sync_ms", "write_ms", "checkpoints")


def _admin() -> Any:
    import psycopg

    from kit.settings import load_settings
    from kit.store.pg_async import conninfo_of

    return psycopg.connect(conninfo_of(load_settings().database_url), autocommit=True)


def _superuser(sql: str) -> None:
    """ALTER SYSTEM and CHECKPOINT are the superuser's; the kit's role only reads."""
    from kit.stack.postgres import Postgres

    Postgres.default().superuser_sql(sql)


def apply(conn: Any, arm: dict[str, str]) -> None:
    statements = []
    for name in SETTINGS:
        if name == "track_wal_io_timing":
            statements.append("ALTER SYSTEM SET track_wal_io_timing = on;")
        elif name in arm:
            statements.append(f"ALTER SYSTEM SET {name} = '{arm[name]}';")
        else:
            statements.append(f"ALTER SYSTEM RESET {name};")
    _superuser("\n".join([*statements, "SELECT pg_reload_conf();"]))
    time.sleep(0.5)
    for name, value in arm.items():
        shown = conn.execute(f"SHOW {name}").fetchone()[0]
        if shown != value:
            raise RuntimeError(f"{name} is {shown!r}, not {value!r}, after the reload")


def wal_counters(conn: Any) -> dict[str, float]:
    row = conn.execute(WAL_SQL).fetchone()
    return dict(zip(WAL_FIELDS, (float(v) for v in row), strict=True))


def one_run(conn: Any, arm: str, processes: int, duration_s: int, tmp: Path) -> dict[str, Any]:
    apply(conn, ARMS[arm])
    port = api_speed.free_port()
    proc = api_speed.serve(None, processes, port, tmp / f"api-{arm}-{processes}.log")
    try:
        _superuser("CHECKPOINT")
        before = wal_counters(conn)
        summary = api_speed.run_mix(MIX, port, duration_s, tmp / f"out-{time.time_ns()}")
        after = wal_counters(conn)
    finally:
        api_speed.stop(proc)
    row = api_speed.figures(MIX, summary)
    calls = max(1.0, row["calls_per_s"] * summary["cpu"]["wall_s"])
    wal = {k: after[k] - before[k] for k in WAL_FIELDS}
    routes = {r["name"]: r["p99_ms"] for r in summary["routes"] if "(setup)" not in r["name"]}
    return {
        "arm": arm,
        "processes": processes,
        "calls_per_s": row["calls_per_s"],
        "p50_ms": row["p50_ms"],
        "p99_worst_route_ms": row["p99_ms"],
        "p99_all_calls_ms": row["p99_all_calls_ms"],
        "p99_by_route_ms": routes,
        "errors": row["errors"],
        "wal_kib_per_call": wal["bytes"] / calls / 1024,
        "fpi_per_call": wal["fpi"] / calls,
        "wal_syncs": wal["syncs"],
        "wal_sync_ms_per_sync": wal["sync_ms"] / max(1.0, wal["syncs"]),
        "wal_sync_ms_total": wal["sync_ms"],
        # the CHECKPOINT above is counted before `before` (the checkpointer reports it done)
        "checkpoints_during": wal["checkpoints"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the arms")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--duration", type=int, default=12, help="seconds per run")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    api_speed.migrate_stack()
    results: list[dict[str, Any]] = []
    total = args.rounds * len(args.processes) * len(ARMS)
    with _admin() as conn, tempfile.TemporaryDirectory(prefix="cf-api-wal-") as tmp:
        try:
            for round_ in range(1, args.rounds + 1):
                for processes in args.processes:
                    for arm in ARMS:
                        run = one_run(conn, arm, processes, args.duration, Path(tmp))
                        row = {"round": round_, **run}
                        results.append(row)
                        Path(args.json).write_text(json.dumps(results, indent=1))
                        print(
                            f"[{len(results)}/{total}] round {round_}, {processes} proc, "
                            f"{arm}: {row['calls_per_s']:.0f} calls/s, p99 worst route "
                            f"{row['p99_worst_route_ms']:.0f} ms "
                            f"(all {row['p99_all_calls_ms']:.0f}), "
                            f"WAL {row['wal_kib_per_call']:.1f} KiB/call, "
                            f"{row['fpi_per_call']:.2f} FPI/call, {row['wal_syncs']:.0f} fsyncs "
                            f"{row['wal_sync_ms_per_sync']:.2f} ms each, "
                            f"checkpoints during {row['checkpoints_during']:.0f}",
                            flush=True,
                        )
        finally:
            apply(conn, {})
            _superuser("ALTER SYSTEM RESET track_wal_io_timing; SELECT pg_reload_conf();")


if __name__ == "__main__":
    main()
