"""`cronfleet calibrate`: measure on the real local stack (from `cronfleet stack up`) the
service times the capacity model charges, and write a calibration profile.

What is measured is the kit's own code: the scan a scheduler node runs
(kit.scheduler.scan.scan_partitions and the store calls in it), the worker's claim and
finish statements (kit.store.claims), on a scratch database migrated with the kit's
migrations (kit.store.scratch, dropped afterwards); the kit's own publisher and consumer
(kit.transport) on scratch topics. Per-row costs come from a least-squares fit of
time against batch size (intercept = per-statement cost, slope = per-row cost); a cost
that comes out negative is refused, not floored: it would mean the method is wrong.
Time spent is split into this process's CPU (the scheduler's or worker's own work) and
the rest of the wall time of the store calls (the database's, round trip included).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import tempfile
import time
import tomllib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.transport.kafka_client import client_config
from sim.scenario import scan_cost_keys

SCHEMA = "cronfleet_calibrate"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="measure service times for the capacity model")
    p.add_argument(
        "--out",
        default="out/calibrate/profile.toml",
        help="profile to write (then `cronfleet sim ... --profile OUT`)",
    )
    p.add_argument(
        "--ledger",
        default=os.environ.get("CRONFLEET_LEDGER_BIN", str(LEDGER_BIN)),
        help="the Go ledger binary the task costs are measured against (--only-tasks; "
        "loadtest/ledger in a cronfleet checkout, built by scripts/build_ledger.sh)",
    )
    p.add_argument(
        "--history-rows",
        type=int,
        default=100_000,
        help="finished runs written to measure the bytes a run row takes",
    )
    p.add_argument(
        "--keep-history",
        action="store_true",
        help="do not measure the run row's bytes: keep [history] of the existing --out",
    )
    p.add_argument(
        "--keep-worker-starts",
        action="store_true",
        help="do not measure the worker's start path: keep worker_* of the existing --out",
    )
    p.add_argument(
        "--only-worker-starts",
        action="store_true",
        help="measure only the worker's hold and start path (no database or broker) and "
        "update those keys of an existing profile",
    )
    p.add_argument(
        "--only-tasks",
        action="store_true",
        help="measure only the worker's CPU per http task (to the Go ledger on loopback) and "
        "per command task (/bin/true), and the target's, and update those keys of an "
        "existing profile (no database or broker)",
    )
    p.add_argument(
        "--http-storm",
        nargs="+",
        default=None,
        metavar="JSON",
        help="set the task loop's CPU per http task and the target's per request as a burst "
        "measured them (http_storm_*: the run JSONs of `benchmarks/http_tasks.py burst`, the "
        "median over them), measuring nothing else unless --only-tasks is given too",
    )
    p.add_argument("--http-tasks", type=int, default=2500, help="http tasks due at once")
    p.add_argument("--command-tasks", type=int, default=300, help="command tasks due at once")
    p.add_argument("--starts", type=int, default=25_000, help="runs held and started at once")
    p.add_argument(
        "--storm-cpu",
        action="append",
        default=[],
        metavar="JSON",
        help="with --only-worker-starts or --only-storm, and --storm-at-t: also set the "
        "storm's CPU per run of each step from a burst sampled by `benchmarks/burst_at_t.py "
        "--before 11 --after 6 --period-ms 100` (its burst-1node.json: CPU by phase); "
        "given once per sampled run (each with its --storm-at-t, in the same order), each "
        "key is the median over the runs",
    )
    p.add_argument(
        "--only-storm",
        action="store_true",
        help="set only the storm's keys from --storm-cpu (and --storm-at-t), measuring "
        "nothing: the worker's start path keeps the values it was measured at",
    )
    p.add_argument(
        "--storm-at-t",
        action="append",
        default=[],
        metavar="JSON",
        help="with --storm-cpu: the same run's all_at_t.json (every task's CPU by thread): "
        "the scan-ahead's steps thread by thread, the hold threads' CPU per run started, "
        "and the rest of the machine's CPU from T to T + 0.3 s",
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from kit.settings import load_settings

    out = Path(args.out)
    if args.only_tasks or args.http_storm:
        stamp = f"{platform.node()} at {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ}"
        costs, notes = {}, {}
        if args.only_tasks:
            http = measure_http_tasks(args.http_tasks, ledger_bin=Path(args.ledger))
            command = measure_command_tasks(args.command_tasks)
            costs = task_costs(http, command)
            notes["task_costs"] = _tasks_note(http, command, stamp)
        if args.http_storm:
            storm_costs, notes["http_storm"] = http_storm_costs(
                [Path(x) for x in args.http_storm], stamp
            )
            costs |= storm_costs
        update_profile(out, costs, 0, starts_measured=False, notes=notes)
        for k, v in costs.items():
            print(f"  {k:<44} {v * 1e6:10.2f} us")
        print(f"updated {args.out}")
        return 0
    if args.only_storm or args.only_worker_starts:
        if args.only_storm and not args.storm_cpu:
            raise SystemExit("--only-storm: needs --storm-cpu (a burst's JSON)")
        if len(args.storm_cpu) != len(args.storm_at_t):
            raise SystemExit(
                "--storm-cpu and --storm-at-t: as many of one as of the other, each pair from "
                "the same sampled run (benchmarks/burst_at_t.py: its burst-1node.json and "
                "all_at_t.json)"
            )
        starts = {} if args.only_storm else measure_worker_starts(args.starts)
        storm: dict[str, float] = {}
        runs: list[dict[str, float]] = []
        if args.storm_cpu:
            for cpu_path, at_t_path in zip(args.storm_cpu, args.storm_at_t, strict=True):
                at_t = storm_at_t(Path(at_t_path))
                runs.append(storm_cpu(Path(cpu_path), at_t))
                if at_t.get("unknown_postgres_s", 0.0) > 0.05:
                    print(
                        f"  ({at_t_path}: PostgreSQL CPU of unknown clients "
                        f"{at_t['unknown_postgres_s']:.2f} s, counted as the rest's)"
                    )
            storm = median_by_key(runs)
        source = None
        if storm:
            pairs = zip(args.storm_cpu, args.storm_at_t, strict=True)
            source = "; ".join(f"{c} and {a}" for c, a in pairs)
            if len(runs) > 1:
                source += f" (each key the median of the {len(runs)} runs)"
        update_profile(
            out, starts, args.starts, storm or None, source, starts_measured=not args.only_storm
        )
        for k, v in {**starts, **storm}.items():
            print(f"  {k:<44} {v * 1e6:10.2f} us")
        print(f"updated {args.out}")
        return 0
    old = _read_profile(out) if out.exists() else None
    if (args.keep_history or args.keep_worker_starts) and old is None:
        raise SystemExit(f"--out: no profile {out} to keep keys of")
    settings = load_settings()
    url = settings.database_url.replace("postgresql+psycopg://", "postgresql://")
    print(f"database {url.split('@')[-1]}, kafka {settings.kafka_bootstrap}")
    stamp = f"{platform.node()} ({platform.machine()}, {platform.python_version()}) at "
    when = lambda: f"{stamp}{dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ}"  # noqa: E731
    numbers: dict[str, float] = {}
    notes: dict[str, str] = {}
    scan, scan_detail = measure_scan(settings.database_url)
    numbers.update(scan)
    notes["scan"] = _scan_note(scan_detail, when())
    print(json.dumps(scan_detail, indent=1))
    kafka, kafka_detail = measure_kafka(settings.kafka_bootstrap)
    numbers.update(kafka)
    notes["kafka"] = _kafka_note(kafka_detail, when())
    print(json.dumps(kafka_detail, indent=1))
    history: dict[str, float] | None
    if args.keep_history:
        assert old is not None
        history, notes["history"] = old["history"], old["measured"].get("history", "")
    else:
        history = measure_run_rows(url, args.history_rows)
        notes["history"] = _history_note(args.history_rows, when())
    if not args.keep_worker_starts:
        numbers.update(measure_worker_starts(args.starts))
        notes["worker_starts"] = _starts_note(args.starts, when())
    if old is not None:
        kept, kept_notes = carried_over(old, args.keep_worker_starts)
        numbers.update(kept)
        notes.update(kept_notes)
    write_profile(out, numbers, notes, history)
    for k, v in sorted(numbers.items()):
        print(f"  {k:<34} {v * 1e6:12.3f} us")
    for k, v in (history or {}).items():
        print(f"  {k:<34} {v:12.0f} bytes")
    print(f"wrote {args.out}")
    return 0


def carried_over(
    old: Mapping[str, Mapping[str, Any]], keep_worker_starts: bool
) -> tuple[dict[str, float], dict[str, str]]:
    """What a full calibration keeps of the profile it replaces: the storm's CPU (storm_*:
    it comes from a storm run, `--only-worker-starts --storm-cpu`) and, when asked, the
    worker's start path (worker_*); the task costs (`--only-tasks`) always; each with its
    [measured] note."""
    keep = ("storm_", "worker_") if keep_worker_starts else ("storm_",)
    numbers = {
        k: float(v)
        for k, v in old["service_times"].items()
        if k.startswith(keep) or k in TASK_KEYS or k in HTTP_STORM_KEYS
    }
    groups = ["storm_cpu", "task_costs", "http_storm"]
    groups += ["worker_starts"] if keep_worker_starts else []
    notes = {g: str(old["measured"][g]) for g in groups if g in old["measured"]}
    return numbers, notes


def _read_profile(path: Path) -> dict[str, dict[str, Any]]:
    data = tomllib.loads(path.read_text())
    return {
        "service_times": {k: float(v) for k, v in data.get("service_times", {}).items()},
        "history": {k: float(v) for k, v in data.get("history", {}).items()},
        "measured": {k: str(v) for k, v in data.get("measured", {}).items()},
    }


def _us(x: float) -> str:
    return f"{x * 1e6:.1f} us"


def _scan_note(d: dict[str, Any], when: str) -> str:
    pc = d["per_class"]
    classes = "; ".join(
        f"{c} ({class_kind(c)}): CPU {_us(v['cpu_per_fire'])}, database "
        f"{_us(v['advance'] + v['insert'])}"
        for c, v in pc.items()
    )
    sql = ", ".join(f"{k} {_us(v)}" for k, v in d["sql_wait_per_fire"].items())
    return (
        f"kit.scheduler.scan.scan_partitions on a scratch database migrated with the kit's "
        f"migrations, one node holding all 1,024 partitions, {d['scans']} scans of 250 to "
        f"8,000 fires ({d['fires']:,} fires): the top-of-hour scenario's cron jobs, "
        f"interval jobs and one-off jobs (~1 KB, overlap allow, misfire run_once), twice "
        f"each, shuffled; CPU = this process's process time over the scan "
        f"(sched_scan_*), database = the store calls' wall time less the CPU inside them "
        f"(db_*); per fire = the slope over batch sizes, by class ({classes}), and by "
        f"schedule kind (the keys' _cron_, _interval_, _one_off_: a kind's classes, the "
        f"cron ones weighted by the top-of-hour window's fires, {PEAK_SHARES}); per "
        f"statement wait per fire, all classes: {sql}; db_scan_fixed_s and "
        f"db_per_partition_s from {d['empty_scans']} empty scans over 16..1,024 partitions; "
        f"the model's scan (database + CPU) against each scan measured: median error "
        f"{d['model_error_median']:+.1%}, worst {d['model_error_max']:+.1%}; claim_s/finish_s "
        f"= median of 200 kit.store.claims.runs_claim/runs_finish_ok of one run; "
        f"db_claim_demand_s/db_finish_demand_s = the slope of their wait per run over "
        f"batches of {d['claim_batches']} (finishes 1,000 at most, as the worker); "
        f"db_statement_s = median of one runs_active_counts finding nothing; measured by "
        f"cronfleet calibrate on {when}"
    )


def _kafka_note(d: dict[str, Any], when: str) -> str:
    tiers = ", ".join(f"{t} {v * 1000:.1f} ms" for t, v in d["e2e_median_by_tier_s"].items())
    return (
        f"the kit's RunPublisher (publish_encoded: produce and flush) and TieredConsumer "
        f"(poll_batch, the kit's fetch.wait.max.ms and tier order) on scratch tier topics "
        f"of 6 partitions (kit.transport.topics.ensure_topics), tiers by the scenario's "
        f"shares; {d['messages']} single runs at random gaps: acknowledgement median = "
        f"kafka_publish_latency_s (p99 {d['ack_p99_s'] * 1000:.1f} ms), produce to poll_batch "
        f"median {d['e2e_median_s'] * 1000:.1f} ms (p99 {d['e2e_p99_s'] * 1000:.1f} ms; by "
        f"tier: {tiers}), kafka_consume_latency_s = that less the acknowledgement (no "
        f"clamping); kafka_publish_per_msg_s = 10 batches of 5,000 (the node's publish "
        f"chunk); measured by cronfleet calibrate on {when}"
    )


def _history_note(rows: int, when: str) -> str:
    return (
        f"{rows} finished runs in the kit's runs table (kit.store.schema: columns and "
        "indexes), written pending -> running -> succeeded, vacuumed; run_row_bytes = table "
        "+ indexes + TOAST per row (the updates' free space kept); run_row_compact_bytes "
        f"after VACUUM FULL; measured by cronfleet calibrate on {when}"
    )


def _starts_note(starts: int, when: str) -> str:
    return (
        "worker_hold_add_s, worker_wheel_pop_s, worker_start_inline_s, "
        "worker_fence_pass_per_run_s, worker_observe_lag_s: kit.worker.Worker's hold, wheel "
        f"pop and inline start of {starts} noop runs due at the same second, its fence "
        "pass over them held (per run) and the finisher's observation of their start lags "
        f"(per run), median of 5 rounds, measured by cronfleet calibrate on {when}"
    )


# ---------------------------------------------------------------- the kit's own statements

DB_NAME = "cronfleet_calibrate"
NODE = "calibrate-node"
# The jobs the scan is measured on, one class at a time, each of one schedule kind
# (kit.core.schedule.ScheduleKind: the profile has each kind's costs per fire). The cron
# classes are the top-of-hour scenario's (sim/scenarios/top-of-hour.toml, the `cohort`
# workload of sim/workload.py): hourly jobs jittered over 10 s, every-minute jobs, and the
# sparse rest of the 10 million schedules (crons of every kind, in several zones). Then
# interval jobs (`every_s`, anchored at their fire: each job's schedule text its own) and
# one-off jobs (`at`: their fire time, each its own), as the kit's API writes them. All
# with overlap `allow` and misfire `run_once`, as the scenario has them.
# A variant: (schedule, zone, jitter_s); a cron's schedule is its expression, an
# interval's its every_s, a one-off's None (its `at` is the trigger's fire time).
JOB_CLASSES: dict[str, tuple[tuple[str | int | None, str, int], ...]] = {
    "hourly": (("0 * * * *", "UTC", 10),),
    "minute": (("* * * * *", "UTC", 0),),
    "sparse": (
        ("*/5 * * * *", "UTC", 0),
        ("0 */2 * * *", "Europe/Berlin", 0),
        ("30 6 * * 1-5", "America/New_York", 0),
        ("15 3 * * *", "Asia/Tokyo", 0),
        ("*/15 9-17 * * 1-5", "Europe/London", 0),
        ("0 0 1 * *", "Australia/Sydney", 0),
        ("45 * * * *", "America/Sao_Paulo", 0),
        ("10 22 * * 0", "Asia/Kolkata", 0),
    ),
    # every_s of at least a minute: each job's next fire is after the last scan's window
    "interval": ((60, "UTC", 0), (300, "UTC", 0), (3600, "UTC", 0)),
    "one_off": ((None, "UTC", 0),),
}
# Each cron class's share of the fires in the scenario's top-of-hour window (50,000
# runs/s: 481,337 hourly jobs over 10 s, 20,000 every-minute jobs, the sparse rest of the
# 2,000 runs/s average): the cron kind's cost per fire is these classes' weighed by them,
# what decides the peak's p99 and the sizing. A kind of one class is that class.
PEAK_SHARES = {"hourly": 0.9627, "minute": 0.0067, "sparse": 0.0306}


def class_schedule(job_class: str, variant: int, fire: dt.datetime) -> Any:
    """The schedule (kit.core.schedule) of a class's job whose trigger fires at `fire`."""
    from kit.core.schedule import CronSchedule, IntervalSchedule, OneOffSchedule

    what, tz, _jitter = JOB_CLASSES[job_class][variant]
    if isinstance(what, str):
        return CronSchedule(what, tz)
    if isinstance(what, int):
        return IntervalSchedule(what, fire.replace(microsecond=0))
    return OneOffSchedule(fire)


def class_kind(job_class: str) -> str:
    """The schedule kind (kit.core.schedule.ScheduleKind) of a class's jobs."""
    from kit.core.schedule import schedule_kind

    kinds = {
        schedule_kind(class_schedule(job_class, v, dt.datetime(2030, 1, 1, tzinfo=dt.UTC)))
        for v in range(len(JOB_CLASSES[job_class]))
    }
    if len(kinds) != 1:
        raise ValueError(f"job class {job_class}: schedules of several kinds {kinds}")
    return str(kinds.pop())


def kind_shares(kind: str) -> dict[str, float]:
    """The classes a kind's cost per fire is weighed from, and their weights."""
    mine = [c for c in JOB_CLASSES if class_kind(c) == kind]
    if not mine:
        raise ValueError(f"no job class of kind {kind}")
    if len(mine) == 1:
        return {mine[0]: 1.0}
    total = sum(PEAK_SHARES[c] for c in mine)
    return {c: PEAK_SHARES[c] / total for c in mine}


SCAN_SIZES = (250, 500, 1000, 2000, 4000, 8000)
SCAN_WINDOW_MS = 500  # each scan's fires are due within this much of each other
# The store calls of one scan (kit.scheduler.scan), each timed; the run inserts apart
# (the database's time per run insert is theirs, the rest of a fire's is the trigger's).
RUN_INSERT_CALLS = ("runs_insert_fired", "runs_insert")
SCAN_CALLS = (
    "partitions_lock_own",
    "triggers_due",
    "runs_cancel_active",
    *RUN_INSERT_CALLS,
    "runs_rearm",
    "runs_cancel_retries",
    "triggers_advance",
    "triggers_delete",
    "triggers_park",
    "triggers_insert",
)
TIERS = {"critical": 0.05, "high": 0.15, "normal": 0.6, "low": 0.2}  # the scenario's


class CallTimer:
    """Wraps functions of a module to add up each one's wall time and this process's CPU
    time spent inside it; what is left of the wall time is the wait on the other side
    (the database's work and the round trip)."""

    def __init__(self, module: Any, names: Sequence[str]) -> None:
        self.module, self.names = module, names
        self.wall: dict[str, float] = dict.fromkeys(names, 0.0)
        self.cpu: dict[str, float] = dict.fromkeys(names, 0.0)
        self._orig: dict[str, Any] = {}

    def __enter__(self) -> CallTimer:
        for name in self.names:
            fn = getattr(self.module, name)
            self._orig[name] = fn

            def timed(*a: Any, _fn: Any = fn, _name: str = name, **kw: Any) -> Any:
                w0, c0 = time.perf_counter(), time.process_time()
                try:
                    return _fn(*a, **kw)
                finally:
                    self.cpu[_name] += time.process_time() - c0
                    self.wall[_name] += time.perf_counter() - w0

            setattr(self.module, name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, fn in self._orig.items():
            setattr(self.module, name, fn)

    def take(self) -> tuple[dict[str, float], dict[str, float]]:
        out = (dict(self.wall), dict(self.cpu))
        self.wall = dict.fromkeys(self.names, 0.0)
        self.cpu = dict.fromkeys(self.names, 0.0)
        return out


@dataclass
class ScanSample:
    job_class: str
    fires: int
    held: int
    wall_s: float
    cpu_s: float
    call_wall: dict[str, float]
    call_cpu: dict[str, float]

    @property
    def wait_s(self) -> float:
        return self.wall_s - self.cpu_s

    def call_wait(self, names: Sequence[str]) -> float:
        return sum(self.call_wall[n] - self.call_cpu[n] for n in names)


def _job_rows(
    job_class: str, fires: Sequence[dt.datetime], rng: random.Random, base: int
) -> list[tuple[Any, ...]]:
    """COPY rows of `jobs`, one per fire time: ~1 KB each (the requirements' size), the
    class's schedules written as the kit writes them (kit.store.jobs: schedule_to_dict,
    the cron's zone or UTC)."""
    from kit.core.schedule import CronSchedule, schedule_to_dict

    body = "report=daily&region=eu-west-1&format=csv&include=all&" * 14
    out = []
    variants = JOB_CLASSES[job_class]
    for i, fire in enumerate(fires):
        job_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        schedule = class_schedule(job_class, i % len(variants), fire)
        tz = schedule.timezone if isinstance(schedule, CronSchedule) else "UTC"
        jitter = variants[i % len(variants)][2]
        task = {
            "type": "http",
            "method": "POST",
            "url": f"https://hooks.example.org/{job_id}",
            "headers": {"Content-Type": "application/x-www-form-urlencoded"},
            "body": body,
        }
        out.append(
            (
                job_id,
                f"tenant-{(base + i) % 100:03d}",
                f"{job_class}-{base + i:08d}",
                json.dumps(schedule_to_dict(schedule)),
                tz,
                json.dumps(task),
                json.dumps({"max_attempts": 3, "base_s": 1.0, "cap_s": 300.0, "jitter": "full"}),
                60,
                "allow",
                json.dumps({"kind": "run_once", "deadline_s": 60}),
                rng.choices(list(TIERS), weights=list(TIERS.values()))[0],
                jitter,
            )
        )
    return out


def measure_scan(admin_url: str, seed: int = 15) -> tuple[dict[str, float], dict[str, Any]]:
    """The kit's scan (kit.scheduler.scan.scan_partitions, the function a node calls once
    a second) on a scratch database migrated with the kit's migrations, one node holding
    all 1,024 partitions: for each job class, batches of SCAN_SIZES fires (twice each, in
    a shuffled order), each due in its own SCAN_WINDOW_MS, scanned with the kit's
    scan-ahead. Per scan: wall time, this process's CPU time (the scheduler's own work:
    deciding each trigger, computing its next fire, building the statements' arrays,
    reading the rows), and each store call's wall and CPU time (its wait = the database).
    Costs per fire are least-squares slopes over the batch sizes. Then empty scans over
    16..1,024 partitions (the per-scan and per-partition wait), then the worker's claim
    and finish statements (kit.store.claims) on the runs the scans made."""
    import psycopg
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from kit.core.defaults import SCAN_AHEAD_MS
    from kit.core.dispatch import scan_window
    from kit.core.partitions import PARTITION_COUNT, partition_of
    from kit.core.timeutil import from_epoch_ms
    from kit.scheduler.scan import JobViews, scan_partitions
    from kit.store import scheduling as sched_sql
    from kit.store.db import engine_for
    from kit.store.run_history import create_day_in
    from kit.store.scratch import migrated_database, pg_url

    rng = random.Random(seed)
    plan = [(c, n) for c in JOB_CLASSES for n in SCAN_SIZES for _ in range(2)]
    rng.shuffle(plan)
    # Scan k takes the fires of [M + 11 s + k w, M + 11 s + (k + 1) w), M a top of the
    # hour, w = SCAN_WINDOW_MS: each job's next fire (the hourly ones' nominal time is at
    # most 10 s of jitter earlier, so the next hour; the every-minute ones' M + 60 s; an
    # interval's a minute or more later; a one-off's none) is after the last window, so no
    # scan reads another's triggers.
    top = dt.datetime(2030, 1, 7, 0, 0, tzinfo=dt.UTC)
    m_ms = int(top.timestamp() * 1000)
    first_ms = m_ms + 11_000
    if first_ms + len(plan) * SCAN_WINDOW_MS > m_ms + 60_000:
        raise ValueError("too many scans for one minute's windows")
    # the trigger rows the one-off classes leave behind: none (no next fire)
    left_behind = sum(n for c, n in plan if class_kind(c) != "one_off")
    with migrated_database(make_url(admin_url), DB_NAME) as db:
        url = pg_url(db)
        engine = engine_for(db.render_as_string(hide_password=False), pool_size=2)
        try:
            with engine.begin() as conn:
                create_day_in(conn, top.date())
            with psycopg.connect(url) as conn:
                with conn.cursor() as cur, cur.copy("COPY tenants (tenant) FROM STDIN") as copy:
                    for t in range(100):
                        copy.write_row((f"tenant-{t:03d}",))
                base = 0
                trig_rows = []
                for k, (job_class, n) in enumerate(plan):
                    lo = first_ms + SCAN_WINDOW_MS * k
                    fires = [from_epoch_ms(lo + rng.randrange(SCAN_WINDOW_MS)) for _ in range(n)]
                    jobs = _job_rows(job_class, fires, rng, base)
                    base += n
                    with (
                        conn.cursor() as cur,
                        cur.copy(
                            "COPY jobs (job_id, tenant, name, schedule, timezone, task_spec, "
                            "retry_policy, timeout_s, overlap, misfire, priority, jitter_s) "
                            "FROM STDIN"
                        ) as copy,
                    ):
                        for row in jobs:
                            copy.write_row(row)
                    for row, at in zip(jobs, fires, strict=True):
                        trig_rows.append((partition_of(row[0]), at, row[0]))
                with (
                    conn.cursor() as cur,
                    cur.copy(
                        "COPY triggers (partition_id, fire_at, job_id, job_version, kind, attempt,"
                        " limits_overlap) FROM STDIN"
                    ) as copy,
                ):
                    for p, at, j in trig_rows:  # overlap 'allow', as the kit writes it
                        copy.write_row((p, at, j, 1, "schedule", 1, False))
                conn.commit()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM (ANALYZE) triggers")
                conn.execute("ANALYZE jobs")
            with engine.begin() as conn:
                epochs = sched_sql.leases_acquire(
                    conn, NODE, range(PARTITION_COUNT), 24 * 3_600_000
                )
            views = JobViews()
            held_runs: list[Any] = []
            samples: list[ScanSample] = []
            empty: list[tuple[int, float, float]] = []  # (partitions, wall, cpu)
            with CallTimer(sched_sql, SCAN_CALLS) as timer:

                def scan(hi_ms: int, parts: Mapping[int, int]) -> tuple[Any, float, float]:
                    now = from_epoch_ms(hi_ms - SCAN_AHEAD_MS)
                    assert scan_window(hi_ms - SCAN_AHEAD_MS, SCAN_AHEAD_MS)[1] == hi_ms
                    w0, c0 = time.perf_counter(), time.process_time()
                    r = scan_partitions(
                        engine, NODE, parts, scan_ahead_ms=SCAN_AHEAD_MS, now=now, jobs=views
                    )
                    return r, time.perf_counter() - w0, time.process_time() - c0

                # empty scans: nothing is due before M + 11 s
                for _ in range(2):  # warm-up (connections, plans)
                    scan(m_ms, epochs)
                for _ in range(4):
                    for k in (16, 64, 256, 1024):
                        parts = {p: epochs[p] for p in list(epochs)[:k]}
                        _r, w, c = scan(m_ms, parts)
                        empty.append((k, w, c))
                timer.take()
                for k, (job_class, n) in enumerate(plan):
                    r, w, c = scan(first_ms + SCAN_WINDOW_MS * (k + 1) - 1, epochs)
                    call_wall, call_cpu = timer.take()
                    if r.triggers != n or len(r.held) != n:
                        raise RuntimeError(
                            f"scan {k}: read {r.triggers}, held {len(r.held)}, expected {n}"
                        )
                    samples.append(ScanSample(job_class, n, len(r.held), w, c, call_wall, call_cpu))
                    held_runs.extend(r.held)
            with engine.connect() as conn:
                left = conn.execute(text("SELECT count(*) FROM triggers")).scalar_one()
            if left != left_behind:  # each cron and interval fire inserted its next trigger
                raise RuntimeError(f"calibrate: {left} triggers left, expected {left_behind}")
            claims = measure_claims(engine, [h.run_id for h in held_runs], rng)
            statement = measure_statement(engine)
        finally:
            engine.dispose()
    return _scan_numbers(samples, empty, claims, statement)


def measure_claims(engine: Any, run_ids: Sequence[str], rng: random.Random) -> dict[str, Any]:
    """The worker's claim and finish (kit.store.claims.runs_claim, runs_finish_ok) on
    pending runs the kit's scan made: one run per statement (the latency a worker sees
    when runs come one at a time), then batches as the worker makes them (a claim per
    consumed batch, up to CLAIM_BATCH; successes FINISH_BATCH at a time)."""
    from kit.store.claims import Claim, runs_claim, runs_finish_ok
    from kit.worker.worker import CLAIM_BATCH, FINISH_BATCH

    ids = list(run_ids)
    rng.shuffle(ids)
    pos = 0

    def take(n: int) -> list[str]:
        nonlocal pos
        out = ids[pos : pos + n]
        pos += n
        if len(out) < n:
            raise RuntimeError("calibrate: not enough runs for the claim batches")
        return out

    def claim(batch: list[str]) -> tuple[list[Any], float, float]:
        w0, c0 = time.perf_counter(), time.process_time()
        got = runs_claim(engine, [Claim(r, 1) for r in batch], "calibrate-worker", 30_000)
        w, c = time.perf_counter() - w0, time.process_time() - c0
        if len(got) != len(batch):
            raise RuntimeError(f"claimed {len(got)} of {len(batch)}")
        return got, w, c

    def finish(claimed: list[Any]) -> tuple[float, float]:
        leases = [(r.run_id, r.lease_token) for r in claimed]
        w0, c0 = time.perf_counter(), time.process_time()
        done, _ = runs_finish_ok(engine, leases)
        w, c = time.perf_counter() - w0, time.process_time() - c0
        if len(done) != len(leases):
            raise RuntimeError(f"finished {len(done)} of {len(leases)}")
        return w, c

    for _ in range(20):  # warm-up
        finish(claim(take(1))[0])
    one_claim, one_finish = [], []
    for _ in range(200):
        got, w, _c = claim(take(1))
        one_claim.append(w)
        one_finish.append(finish(got)[0])
    claim_pts: list[tuple[int, float, float]] = []
    finish_pts: list[tuple[int, float, float]] = []
    sizes = [n for n in (50, 200, 500, 1000, CLAIM_BATCH) for _ in range(3)]
    rng.shuffle(sizes)
    for n in sizes:
        got, w, c = claim(take(n))
        claim_pts.append((n, w, c))
        for i in range(0, len(got), FINISH_BATCH):
            chunk = got[i : i + FINISH_BATCH]
            fw, fc = finish(chunk)
            finish_pts.append((len(chunk), fw, fc))
    return {
        "one_claim": one_claim,
        "one_finish": one_finish,
        "claim": claim_pts,
        "finish": finish_pts,
    }


def measure_statement(engine: Any, n: int = 300) -> float:
    """One kit statement that finds nothing (kit.store.scheduling.runs_active_counts of a
    job without runs), round trip included: the median over `n`."""
    from kit.store import scheduling as sched_sql

    out = []
    with engine.connect() as conn:
        for _ in range(n):
            job = str(uuid.uuid4())
            t0 = time.perf_counter()
            sched_sql.runs_active_counts(conn, [job])
            out.append(time.perf_counter() - t0)
        conn.rollback()
    return statistics.median(out)


def _scan_numbers(
    samples: list[ScanSample],
    empty: list[tuple[int, float, float]],
    claims: dict[str, Any],
    statement_s: float,
) -> tuple[dict[str, float], dict[str, Any]]:
    """The profile's keys from the samples, and the detail the profile's notes quote."""
    from kit.core.partitions import PARTITION_COUNT
    from kit.core.schedule import ScheduleKind

    per_class: dict[str, dict[str, float]] = {}
    for job_class in JOB_CLASSES:
        mine = [s for s in samples if s.job_class == job_class]
        cpu0, cpu1 = _fit_raw([(s.fires, s.cpu_s) for s in mine])
        _, ins = _fit_raw([(s.fires, s.call_wait(RUN_INSERT_CALLS)) for s in mine])
        wait0, wait1 = _fit_raw([(s.fires, s.wait_s) for s in mine])
        # the trigger's advance: its read, delete and next insert (a one-off has none), and
        # the rest of the wait that grows with the fires (the commit's WAL), so the two add
        # up to the scan's wait
        adv = wait1 - ins
        wall0, wall1 = _fit_raw([(s.fires, s.wall_s) for s in mine])
        per_class[job_class] = {
            "cpu_fixed": cpu0,
            "cpu_per_fire": cpu1,
            "advance": adv,
            "insert": ins,
            "wait_fixed": wait0,
            "wait_per_fire": wait1,
            "wall_fixed": wall0,
            "wall_per_fire": wall1,
        }
    # each schedule kind's costs: its classes' weighed (the cron kind: by the peak's
    # shares); every kind the model may charge has its keys
    per_kind = {
        kind.value: {
            k: sum(w * per_class[c][k] for c, w in kind_shares(kind).items())
            for k in per_class[next(iter(per_class))]
        }
        for kind in ScheduleKind
    }
    wait_fixed, per_part = _fit_raw([(k, w - c) for k, w, c in empty])
    cpu_fixed, _ = _fit_raw([(k, c) for k, _w, c in empty])
    one_claim = statistics.median(claims["one_claim"])
    one_finish = statistics.median(claims["one_finish"])
    _, claim_row = _fit_raw([(n, w - c) for n, w, c in claims["claim"]])
    _, finish_row = _fit_raw([(n, w - c) for n, w, c in claims["finish"]])
    _, claim_cpu = _fit_raw([(n, c) for n, _w, c in claims["claim"]])
    _, finish_cpu = _fit_raw([(n, c) for n, _w, c in claims["finish"]])
    numbers = {
        "sched_scan_cpu_fixed_s": max(cpu_fixed, 0.0),
        "db_scan_fixed_s": wait_fixed,
        "db_per_partition_s": per_part,
        "db_statement_s": statement_s,
        "claim_s": one_claim,
        "finish_s": one_finish,
        "db_claim_demand_s": claim_row,
        "db_finish_demand_s": finish_row,
    }
    for kind, costs in per_kind.items():
        cpu_key, advance_key, insert_key = scan_cost_keys(kind)
        numbers[cpu_key] = costs["cpu_per_fire"]
        numbers[advance_key] = costs["advance"]
        numbers[insert_key] = costs["insert"]
    bad = {k: v for k, v in numbers.items() if v <= 0}
    if bad:  # a cost cannot be negative or nothing: the measurement went wrong
        raise RuntimeError(f"calibrate: non-positive costs measured: {bad}")
    # the model's scan (sim/model.py) against each scan measured: its service time
    # (database) plus the node's CPU, at 1,024 partitions
    errors = []
    for s in samples:
        c = per_class[s.job_class]
        predicted = (
            wait_fixed
            + PARTITION_COUNT * per_part
            + s.fires * (c["advance"] + c["insert"])
            + max(cpu_fixed, 0.0)
            + s.fires * c["cpu_per_fire"]
        )
        errors.append((predicted - s.wall_s) / s.wall_s)
    detail = {
        "per_class": per_class,
        "per_kind": per_kind,
        "scans": len(samples),
        "fires": sum(s.fires for s in samples),
        "empty_scans": len(empty),
        "model_error_median": statistics.median(errors),
        "model_error_max": max(errors, key=abs),
        "claim_cpu_per_run_s": claim_cpu,
        "finish_cpu_per_run_s": finish_cpu,
        "claim_batches": sorted({n for n, _w, _c in claims["claim"]}),
        "sql_wait_per_fire": {
            **{
                name: _fit_raw([(s.fires, s.call_wall[name] - s.call_cpu[name]) for s in samples])[
                    1
                ]
                for name in (
                    "triggers_due",
                    *RUN_INSERT_CALLS,
                    "triggers_advance",
                    "triggers_delete",
                )
            },
            "commit and the rest": _fit_raw(
                [(s.fires, s.wait_s - s.call_wait(SCAN_CALLS)) for s in samples]
            )[1],
        },
    }
    return numbers, detail


def _fit_raw(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of a least-squares line, not floored: a negative one says the
    method is wrong, and the caller refuses it."""
    xs = [float(x) for x, _ in points]
    ys = [float(y) for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def measure_kafka(
    bootstrap: str, n: int = 300, seed: int = 15
) -> tuple[dict[str, float], dict[str, Any]]:
    """The run queue as the kit uses it: its own publisher (kit.transport.publisher.
    RunPublisher: idempotent, acks=all, linger 5 ms, lz4; produce and flush a batch) and
    its own consumer (kit.transport.consumer.TieredConsumer: one consumer per tier, fetch
    wait as the kit sets it, highest tier first) on scratch tier topics made by the kit's
    ensure_topics (deleted afterwards), messages spread over the tiers by the scenario's
    shares. Measured on one clock (this process; the consumer polls on its own thread,
    as a worker's consume loop does):
    - kafka_publish_per_msg_s: a node's publish of PUBLISH_CHUNK-run batches, per run;
    - kafka_publish_latency_s: one run published alone, produce to acknowledgement;
    - kafka_consume_latency_s: produce to the consumer's poll_batch returning it, less
      the acknowledgement: the model's publish + consume is the measured end to end.
    Medians over `n` single messages sent at random gaps (not in step with the
    consumer's own waits)."""
    import threading

    from confluent_kafka.admin import AdminClient

    from kit.core.ids import run_id
    from kit.scheduler.node import PUBLISH_CHUNK
    from kit.transport.consumer import TieredConsumer
    from kit.transport.message import RunMessage, dead_letter_topic, topic_for
    from kit.transport.publisher import RunPublisher, encode
    from kit.transport.topics import ensure_topics

    rng = random.Random(seed)
    prefix = f"cronfleet-calibrate-{uuid.uuid4().hex[:8]}"
    created = ensure_topics(bootstrap, partitions=6, prefix=prefix)
    received: dict[str, float] = {}
    seen: set[str] = set()  # tiers read (the warm-up lasts until each is)
    stop = threading.Event()
    ready = threading.Event()
    failure: list[BaseException] = []

    def consume() -> None:
        try:
            with TieredConsumer(bootstrap, f"{prefix}-group", topic_prefix=prefix) as consumer:
                while not stop.is_set():
                    got = consumer.poll_batch(max_messages=2000, timeout_s=0.5)
                    now = time.perf_counter()
                    for m in got:
                        received[m.run_id] = now
                        seen.add(m.tier)
                    if got:
                        consumer.commit()
                    if not ready.is_set() and len(seen) == len(TIERS):
                        ready.set()
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)
            ready.set()

    def message(tier: str) -> Any:
        job = str(uuid.uuid4())
        ms = 1_900_000_000_000 + rng.randrange(10**9)
        return encode(RunMessage(run_id(job, ms), job, 1, ms, tier))

    tiers, weights = list(TIERS), list(TIERS.values())
    publisher = RunPublisher(bootstrap, topic_prefix=prefix)
    thread = threading.Thread(target=consume, name="calibrate-consumer", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not ready.is_set() and time.monotonic() < deadline:
            publisher.publish_encoded([message(t) for t in tiers])  # until every tier is read
            time.sleep(0.5)
        if failure or not ready.is_set():
            raise RuntimeError(f"calibrate: the kit's consumer read nothing: {failure}")
        time.sleep(2.0)
        ack: list[float] = []
        e2e: dict[str, list[float]] = {t: [] for t in tiers}
        for _ in range(n):
            time.sleep(rng.uniform(0.005, 0.06))
            tier = rng.choices(tiers, weights=weights)[0]
            msg = message(tier)
            t0 = time.perf_counter()
            publisher.publish_encoded([msg])
            ack.append(time.perf_counter() - t0)
            until = time.monotonic() + 5
            while msg.run_id not in received and time.monotonic() < until:
                time.sleep(0.0005)
            if msg.run_id not in received:
                raise RuntimeError("calibrate: a run message was not consumed within 5 s")
            e2e[tier].append(received[msg.run_id] - t0)
        chunks = 10
        t0 = time.perf_counter()
        for _ in range(chunks):
            publisher.publish_encoded(
                [message(t) for t in rng.choices(tiers, weights=weights, k=PUBLISH_CHUNK)]
            )
        per_msg = (time.perf_counter() - t0) / (chunks * PUBLISH_CHUNK)
    finally:
        stop.set()
        thread.join(10)
        publisher.close()
        if created:
            AdminClient(client_config(bootstrap)).delete_topics(created, operation_timeout=10)
    all_e2e = [x for v in e2e.values() for x in v]
    pub = statistics.median(ack)
    consume_s = statistics.median(all_e2e) - pub
    if consume_s <= 0:
        raise RuntimeError(
            f"calibrate: end to end {statistics.median(all_e2e):.6f} s is not above the "
            f"acknowledgement {pub:.6f} s: the method is wrong"
        )
    detail = {
        "messages": n,
        "e2e_median_s": statistics.median(all_e2e),
        "e2e_p99_s": float(sorted(all_e2e)[int(0.99 * (len(all_e2e) - 1))]),
        "e2e_median_by_tier_s": {t: statistics.median(v) for t, v in e2e.items() if v},
        "ack_p99_s": float(sorted(ack)[int(0.99 * (len(ack) - 1))]),
        "topics": [topic_for(t, prefix) for t in tiers] + [dead_letter_topic(prefix)],
    }
    return {
        "kafka_publish_per_msg_s": per_msg,
        "kafka_publish_latency_s": pub,
        "kafka_consume_latency_s": consume_s,
    }, detail


def measure_run_rows(url: str, rows: int) -> dict[str, float]:
    """Bytes one finished run takes in the run history: the kit's own `runs` table (its
    columns and indexes, from kit.store.schema) in a scratch schema, `rows` runs written
    through their life as the kit writes them (insert pending, claim, finish: a published
    run stays pending, there is no dispatched mark), then vacuumed; table + indexes +
    TOAST divided by the rows. The space the updates' dead versions leave is kept (a
    retained table reuses it, it does not give it back), so this is the steady-state
    size, not the compacted one."""
    import psycopg
    from sqlalchemy import MetaData, create_engine

    from kit.core.ids import run_id
    from kit.store.schema import runs

    engine = create_engine(
        url.replace("postgresql://", "postgresql+psycopg://"), hide_parameters=True
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
    scratch = MetaData(schema=SCHEMA)
    runs.to_metadata(scratch, schema=SCHEMA)
    scratch.create_all(engine)
    engine.dispose()
    table = f"{SCHEMA}.runs"
    # runs is partitioned by day (kit/store/run_history.py): the rows go to one partition,
    # which is what a day of history is and what is measured
    day = f"{SCHEMA}.runs_day"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {day} PARTITION OF {table} DEFAULT")
    base = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    with psycopg.connect(url, autocommit=True) as conn:
        with (
            conn.cursor() as cur,
            cur.copy(
                f"COPY {table} (run_id, job_id, tenant, job_version, priority, scheduled_at, "
                "trigger_kind) FROM STDIN"
            ) as copy,
        ):
            for i in range(rows):
                job = uuid.uuid4()
                at = base + dt.timedelta(milliseconds=i * 10)
                copy.write_row(
                    (
                        run_id(str(job), at),
                        job,
                        f"tenant-{i % 1000}",
                        1,
                        "normal",
                        at,
                        "schedule",
                    )
                )
        conn.execute(
            f"UPDATE {table} SET status = 'running', lease_token = md5(run_id::text), "
            "worker_id = 'worker-' || (abs(hashtext(run_id::text)) % 400), "
            "lease_expires_at = scheduled_at + interval '30 s', "
            "started_at = scheduled_at + interval '5 ms'"
        )
        conn.execute(
            f"UPDATE {table} SET status = 'succeeded', lease_token = NULL, "
            "lease_expires_at = NULL, finished_at = started_at + interval '300 ms'"
        )
        conn.execute(f"VACUUM ANALYZE {day}")
        total = conn.execute(f"SELECT pg_total_relation_size('{day}')").fetchone()[0]
        heap = conn.execute(f"SELECT pg_relation_size('{day}')").fetchone()[0]
        conn.execute(f"VACUUM FULL {day}")
        compact = conn.execute(f"SELECT pg_total_relation_size('{day}')").fetchone()[0]
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    return {
        "run_row_bytes": total / rows,
        "run_row_heap_bytes": heap / rows,
        "run_row_compact_bytes": compact / rows,
    }


def measure_worker_starts(n: int, repeats: int = 5) -> dict[str, float]:
    """CPU per run of the worker's own hold-and-start path (kit.worker.Worker), for runs
    claimed ahead and due at the same second: into the hold wheel, popped from it at the
    second, started inline (noop); and of what else takes the worker's interpreter lock
    while it holds them: a pass of the fence thread over the held runs (per run held), the
    finisher's observation of the start lags (per run started). Runs the kit's code in this
    process, no database, no broker; the median of `repeats` rounds of n runs (one
    worker's share of a burst)."""
    from sqlalchemy import create_engine

    from kit.worker.worker import Worker, task_executor

    # never opened: the worker only needs one to exist
    engine = create_engine("postgresql+psycopg://calibrate@127.0.0.1:9/none", hide_parameters=True)
    due = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    add: list[float] = []
    pop: list[float] = []
    start: list[float] = []
    fence: list[float] = []
    observe: list[float] = []
    for _ in range(repeats):
        w = Worker(engine, None, None, "calibrate", 1024, 30_000, execute=task_executor())  # type: ignore[arg-type]
        w._pool.shutdown(wait=False)
        w.clock.observe(0.0, 0.0, 0.0)
        entries = _entries(n, {"type": "noop"}, due, timeout_s=None)
        t0 = time.perf_counter()
        w._hold(entries)
        t1 = time.perf_counter()
        w._fence_pass(time.monotonic())  # every held run walked, none due to be fenced
        tf = time.perf_counter()
        with w._held_changed:
            popped = w._wheel.pop_due(int(due.timestamp() * 1000))
        t2 = time.perf_counter()
        w._execute_inline(popped)
        t3 = time.perf_counter()
        w._observe_lags()  # the finisher's: every start's lag into the histogram
        t4 = time.perf_counter()
        if len(popped) != n or len(w._succeeded) != n or w._lags:
            raise RuntimeError("the worker did not start every held run")
        add.append((t1 - t0) / n)
        fence.append((tf - t1) / n)
        pop.append((t2 - tf) / n)
        start.append((t3 - t2) / n)
        observe.append((t4 - t3) / n)
    return {
        "worker_hold_add_s": statistics.median(add),
        "worker_wheel_pop_s": statistics.median(pop),
        "worker_start_inline_s": statistics.median(start),
        "worker_fence_pass_per_run_s": statistics.median(fence),
        "worker_observe_lag_s": statistics.median(observe),
    }


# Task costs (the storm model's `storm.task=http|command`): the Go ledger the benchmarks
# send their webhooks to (loadtest/ledger, built by scripts/build_ledger.sh)
LEDGER_BIN = Path("loadtest/ledger/bin/ledger")  # from a checkout's root; --ledger elsewhere
TASK_KEYS = (
    "worker_http_loop_cpu_s",
    "worker_http_loop_before_send_s",
    "worker_http_submit_s",
    "http_target_cpu_s",
    "worker_command_cpu_s",
    "worker_command_submit_s",
    "command_child_cpu_s",
)


# the same two costs as an http burst of the kit measured them (the storm model uses them
# in place of the isolated ones: sim.storm.http_costs)
HTTP_STORM_KEYS = ("http_storm_loop_cpu_s", "http_storm_target_cpu_s")


def http_storm_costs(paths: Sequence[Path], stamp: str) -> tuple[dict[str, float], str]:
    """The task loop's CPU per task and the target's per request in bursts of the kit
    (`benchmarks/http_tasks.py burst`: each worker's task-loop thread from /proc between
    T - 11 s and the last run's end, the ledger's process likewise), the median over the
    runs given, and the note that says which."""
    loops: list[float] = []
    targets: list[float] = []
    seen: list[str] = []
    for path in paths:
        try:
            r = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--http-storm: {path}: {exc}") from None
        if r.get("task") != "http" or r.get("mode") != "burst":
            raise SystemExit(f"--http-storm: {path} is not an http burst (task, mode)")
        if not r.get("task_loop_cpu_ms_per_task") or not r.get("target_cpu_ms_per_request"):
            raise SystemExit(
                f"--http-storm: {path} has no task_loop_cpu_ms_per_task and "
                "target_cpu_ms_per_request (a burst of benchmarks/http_tasks.py as it is now)"
            )
        loops.append(r["task_loop_cpu_ms_per_task"] / 1000)
        targets.append(r["target_cpu_ms_per_request"] / 1000)
        seen.append(
            f"{path.name} ({r.get('arrived', '?')} tasks, lag p99 {r['lag_s'][1]:.3f} s: loop "
            f"{loops[-1] * 1e6:.1f} us, target {targets[-1] * 1e6:.1f} us)"
        )
    costs = {
        "http_storm_loop_cpu_s": statistics.median(loops),
        "http_storm_target_cpu_s": statistics.median(targets),
    }
    note = (
        "http_storm_*: the workers' task-loop threads' CPU per http task and the Go "
        "ledger's per request inside bursts of the kit (benchmarks/http_tasks.py burst, "
        "/proc schedstat from T - 11 s to the last run's end), the median of "
        f"{'; '.join(seen)}; set by cronfleet calibrate on {stamp}"
    )
    return costs, note


@dataclass(frozen=True)
class TaskRound:
    """CPU seconds one round of n tasks took, where it was spent."""

    n: int
    loop_s: float = 0.0  # the worker's task-loop thread (http)
    loop_unsent_s: float = 0.0  # the same tasks refused at their start: no request sent
    submit_s: float = 0.0  # the hold thread handing the due runs on (loop or pool)
    worker_s: float = 0.0  # the worker process, every thread (command)
    target_s: float = 0.0  # the other end: the ledger's process, or the commands' own


def task_costs(http: Sequence[TaskRound], command: Sequence[TaskRound]) -> dict[str, float]:
    """Per task, the median over rounds: the loop's CPU per http task and the part of it
    before the request leaves (the round whose runs were refused at their start: lookup,
    guard, connection, begin; the rest, the write and the response, comes after the
    target), the hold thread's hand-over, the target's CPU; a command's CPU in the worker
    and in its own process. A part larger than its whole is refused, not clamped: it would
    mean the method is wrong."""

    def per(rounds: Sequence[TaskRound], field: str) -> float:
        return statistics.median(getattr(r, field) / r.n for r in rounds)

    out: dict[str, float] = {}
    if http:
        out |= {
            "worker_http_loop_cpu_s": per(http, "loop_s"),
            "worker_http_loop_before_send_s": per(http, "loop_unsent_s"),
            "worker_http_submit_s": per(http, "submit_s"),
            "http_target_cpu_s": per(http, "target_s"),
        }
        if out["worker_http_loop_before_send_s"] > out["worker_http_loop_cpu_s"]:
            raise RuntimeError(
                "http: the loop's CPU before the request leaves exceeds the whole request's "
                f"({out['worker_http_loop_before_send_s'] * 1e6:.1f} > "
                f"{out['worker_http_loop_cpu_s'] * 1e6:.1f} us)"
            )
    if command:
        out |= {
            "worker_command_cpu_s": per(command, "worker_s"),
            "worker_command_submit_s": per(command, "submit_s"),
            "command_child_cpu_s": per(command, "target_s"),
        }
    if any(v < 0 for v in out.values()):
        raise RuntimeError(f"a negative task cost: {out}")
    return out


def _proc_cpu_s(pid: int) -> float:
    """A process's user + system CPU (Linux /proc; 10 ms ticks: sum over enough work)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _task_worker(policy: Any) -> Any:
    """The kit's worker with no database or broker (never opened), its task loop started."""
    from sqlalchemy import create_engine

    from kit.worker.worker import Worker, task_executor

    engine = create_engine("postgresql+psycopg://calibrate@127.0.0.1:9/none", hide_parameters=True)
    w = Worker(engine, None, None, "calibrate", 1024, 30_000, execute=task_executor(policy))  # type: ignore[arg-type]
    w.clock.observe(0.0, 0.0, 0.0)
    return w


def _entries(
    n: int, spec: dict[str, Any], due: dt.datetime, timeout_s: int | None = 60
) -> list[Any]:
    """`n` runs as a worker holds them once claimed, due at `due`, leases good for an hour."""
    from kit.store.claims import ClaimedRun
    from kit.worker.worker import _InFlight

    confirmed = time.monotonic() + 3600
    return [
        _InFlight(
            ClaimedRun(
                run_id=str(uuid.uuid4()),
                job_id=f"j{i}",
                tenant="t",
                attempt=1,
                lease_token="tok",
                priority="normal",
                scheduled_at=due,
                claimed_at=due,
                task_spec=spec,
                timeout_s=timeout_s,
            ),
            confirmed_until=confirmed,
        )
        for i in range(n)
    ]


def _until(done: Any, bound_s: float, what: str) -> None:
    deadline = time.monotonic() + bound_s
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not done within {bound_s:g} s")
        time.sleep(0.005)


def _start_round(w: Any, n: int, spec: dict[str, Any], fenced: bool = False) -> float:
    """Hold n runs due at one second, pop them and start them as the hold thread does
    (`Worker._start`); returns the hold thread's CPU for the hand-over."""
    due = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    entries = _entries(n, spec, due)
    for e in entries:
        e.fenced = fenced
    w._hold(entries)
    with w._held_changed:
        popped = w._wheel.pop_due(int(due.timestamp() * 1000))
    t0 = time.thread_time()
    w._start(popped)
    return time.thread_time() - t0


def measure_http_tasks(
    n: int = 2500, repeats: int = 3, ledger_bin: Path = LEDGER_BIN
) -> list[TaskRound]:
    """The worker's CPU per http task on its task loop, for n POSTs due at one second (one
    worker's share of the 5,000-task burst of benchmarks/http_tasks.py, the same request)
    to the Go ledger on loopback, through the kit's own path (`Worker._start`, the task
    loop, kit.tasks.http and its kept-alive pool); the ledger's CPU is the target's. Each
    round also starts n runs refused at their start (fenced): their loop CPU is the part
    before a request leaves."""
    from kit.tasks.policy import PolicySource

    if not ledger_bin.is_file():
        raise SystemExit(
            f"--ledger {ledger_bin}: no such file (in a cronfleet checkout: "
            "bash scripts/build_ledger.sh builds loadtest/ledger/bin/ledger)"
        )
    rounds: list[TaskRound] = []
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        ledger = subprocess.Popen(
            [
                str(ledger_bin),
                "-addr",
                "127.0.0.1:0",
                "-out",
                f"{tmp}/ledger.tsv",
                "-port-file",
                str(port_file),
            ]
        )
        w = None
        try:
            _until(port_file.exists, 10, "the ledger's port")
            time.sleep(0.05)
            spec = {
                "type": "http",
                "method": "POST",
                "url": f"http://127.0.0.1:{int(port_file.read_text())}/hook",
                "headers": {"Content-Type": "application/json"},
                "body": "{}",
            }
            w = _task_worker(PolicySource(None, "127.0.0.1"))
            w._task_loop.start()
            loop = w._task_loop.loop

            def loop_cpu() -> float:
                return asyncio.run_coroutine_threadsafe(_thread_time(), loop).result(10)

            def quiet() -> bool:
                return not w._task_loop._tasks

            for r in range(repeats + 1):  # the first: imports and connections, not counted
                size = n if r else min(n, 200)
                w._succeeded.clear()
                c0 = loop_cpu()
                _start_round(w, size, spec, fenced=True)
                _until(lambda: w._waiting == 0 and quiet(), 60, "http runs refused")
                c1, t1 = loop_cpu(), _proc_cpu_s(ledger.pid)
                submit = _start_round(w, size, spec)
                _until(lambda k=size: len(w._succeeded) >= k and quiet(), 120, "http runs")
                c2, t2 = loop_cpu(), _proc_cpu_s(ledger.pid)
                if r:
                    rounds.append(TaskRound(size, c2 - c1, c1 - c0, submit, target_s=t2 - t1))
            lines = Path(f"{tmp}/ledger.tsv")
            time.sleep(0.3)  # the ledger flushes every 100 ms
            if len(lines.read_text().splitlines()) < repeats * n:
                raise RuntimeError("http: the ledger did not record every request")
        finally:
            if w is not None and w._task_loop is not None:
                w._task_loop.stop()
                w._pool.shutdown(wait=False)
            ledger.terminate()
            ledger.wait(10)
    return rounds


async def _thread_time() -> float:
    return time.thread_time()


def measure_command_tasks(
    n: int = 300, repeats: int = 3, argv: tuple[str, ...] = ("/bin/true",)
) -> list[TaskRound]:
    """The worker's CPU per command task (`Worker._start` to a pool thread, the kit's
    command runner: the task policy, the process spawned in its own group, waited for),
    and the command's own CPU (its process, reaped by the worker); n commands due at one
    second per round."""
    from kit.tasks.policy import PolicySource, local_policy_toml

    rounds: list[TaskRound] = []
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "tasks.toml"
        policy.write_text(local_policy_toml("t", [argv[0]]))  # as nobody where root
        w = _task_worker(PolicySource(str(policy)))
        spec = {"type": "command", "argv": list(argv)}
        try:
            for r in range(repeats + 1):  # the first: imports, the keeper, not counted
                size = n if r else min(n, 20)
                w._succeeded.clear()
                p0 = time.process_time()
                k0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                submit = _start_round(w, size, spec)
                _until(lambda k=size: len(w._succeeded) >= k, 120, "command runs")
                p1 = time.process_time()
                k1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                child = k1.ru_utime + k1.ru_stime - k0.ru_utime - k0.ru_stime
                if r:
                    rounds.append(
                        TaskRound(size, submit_s=submit, worker_s=p1 - p0, target_s=child)
                    )
        finally:
            w._pool.shutdown(wait=True)
    return rounds


def _tasks_note(http: Sequence[TaskRound], command: Sequence[TaskRound], when: str) -> str:
    def us(rounds: Sequence[TaskRound], field: str) -> str:
        return ", ".join(f"{getattr(r, field) / r.n * 1e6:.1f}" for r in rounds)

    return (
        "worker_http_*, http_target_cpu_s: kit.worker.Worker's start (Worker._start, "
        f"worker_http_submit_s) of {http[0].n if http else 0} http POSTs due at one second, "
        "run on its task loop through kit.tasks.http to the Go ledger on loopback (the "
        "benchmark's target and request), concurrency 1024; worker_http_loop_cpu_s = the "
        "loop thread's CPU per task (rounds: " + us(http, "loop_s") + " us), "
        "worker_http_loop_before_send_s = the same for runs refused at their start (no request "
        "sent; rounds: " + us(http, "loop_unsent_s") + " us), http_target_cpu_s = the "
        "ledger's CPU per request (rounds: " + us(http, "target_s") + " us); "
        f"worker_command_*, command_child_cpu_s: {command[0].n if command else 0} commands "
        "(/bin/true) due at one second through the kit's command runner on the worker's pool; "
        "the worker process's CPU per command (rounds: " + us(command, "worker_s") + " us), "
        "the command's own (rounds: " + us(command, "target_s") + " us); median of "
        f"{len(http)} rounds each after a warm-up, no database, measured by cronfleet "
        f"calibrate on {when}"
    )


# What the storm model runs itself at the second (burst_at_t.py's categories): the workers'
# hold, finisher, fence and heartbeat threads and their PostgreSQL backends; and the
# sampler, which the compared runs do not have. The rest is charged as the machine's CPU
# at T.
AT_T_MODELLED = re.compile(
    r"worker-\d+ (hold|finisher|fence|heartbeat)|postgres for worker-\d+|sampler"
)
AT_T_WINDOW = "T..T+0.3"
AT_T_WINDOWS = ("T-0.3..T", "T..T+0.3", "T+0.3..T+1")  # disjoint: where the hold threads run
AT_T_SLOT_S = 0.1  # the rest's CPU at T is also taken 100 ms at a time (the calibration's sweeps)
AHEAD, AFTER = "ahead", "after"
# The storm's steps the model runs, by burst_at_t.py's categories (threads by role): profile
# key -> (window, the categories whose CPU in that window it is, per run)
STORM_STEPS: dict[str, tuple[str, str]] = {
    "storm_ahead_scheduler_scan_cpu_per_run_s": (AHEAD, r"scheduler scan"),
    "storm_ahead_scheduler_publish_cpu_per_run_s": (AHEAD, r"scheduler publish"),
    "storm_ahead_scheduler_native_cpu_per_run_s": (AHEAD, r"scheduler native"),
    "storm_ahead_postgres_scan_cpu_per_run_s": (AHEAD, r"postgres for scheduler"),
    "storm_ahead_postgres_claim_cpu_per_run_s": (AHEAD, r"postgres for worker-\d+"),
    "storm_ahead_worker_claim_cpu_per_run_s": (AHEAD, r"worker-\d+ main"),
    "storm_ahead_worker_native_cpu_per_run_s": (AHEAD, r"worker-\d+ native"),
    "storm_ahead_broker_cpu_per_run_s": (AHEAD, r"broker"),
    "storm_after_worker_finish_cpu_per_run_s": (AFTER, r"worker-\d+ finisher"),
    "storm_after_postgres_cpu_per_run_s": (AFTER, r"postgres for worker-\d+"),
    "storm_after_broker_cpu_per_run_s": (AFTER, r"broker"),
}
# in the scan-ahead, besides its steps, the model runs the workers' fence passes (priced
# by the isolated measurement, worker_fence_pass_per_run_s): not the rest's
AHEAD_ALSO_MODELLED = re.compile(r"worker-\d+ fence")


def storm_at_t(path: Path) -> dict[str, Any]:
    """What the storm costs thread by thread, from `benchmarks/burst_at_t.py`'s
    all_at_t.json: the workers' hold threads' CPU (pop and start at T, as the storm's heap
    and caches make it, which the isolated measurement does not see), the CPU the rest of
    the machine takes from T to T + 0.3 s while they start, the sampler's own CPU; and, from
    a run sampled from the scan-ahead's start to past the last finish (`--before 11
    --after 6`), each category's CPU in the scan-ahead (`ahead`) and after T (`after`),
    and the machine's busy CPU in the scan-ahead."""
    import json

    d = json.loads(path.read_text())
    cats = d.get("by_category_ms")
    windows = d.get("windows", {})
    if not cats or AT_T_WINDOW not in windows:
        raise SystemExit(f"--storm-at-t: {path} has no by_category_ms over {AT_T_WINDOW}")
    hold = [c for c in cats if re.fullmatch(r"worker-\d+ hold", c)]
    if not hold:
        raise SystemExit(f"--storm-at-t: {path} names no worker's hold thread (py-spy missing?)")
    lo, hi = windows[AT_T_WINDOW]
    rest = sum(v[AT_T_WINDOW][0] for c, v in cats.items() if not AT_T_MODELLED.fullmatch(c))
    out: dict[str, Any] = {
        "hold_cpu_s": sum(cats[c].get(w, [0.0])[0] for c in hold for w in AT_T_WINDOWS) / 1000,
        "storm_at_t_cpu_s": rest / 1000,
        "storm_at_t_window_s": float(hi) - float(lo),
        "sampler_cpu_s": float(d.get("sampler_cpu_ms", 0.0)) / 1000,
    }
    # the same rest, 100 ms at a time (burst_at_t.py's 20 ms slots, by slot start): it
    # is not even over the window (the node's scan at the whole second T, the benchmark's
    # poll), and the model takes it as it came
    slots = d.get("slots_ms", {})
    n = round((float(hi) - float(lo)) / AT_T_SLOT_S)
    if slots and n > 0:
        part = [0.0] * n
        for c, by_slot in slots.items():
            if AT_T_MODELLED.fullmatch(c):
                continue
            for at, ms in by_slot.items():
                k = math.floor((float(at) - float(lo)) / AT_T_SLOT_S + 1e-9)
                if 0 <= k < n:
                    part[k] += ms
        for k, ms in enumerate(part):
            out[f"storm_at_t_slot_{k}_cpu_s"] = ms / 1000
        out["storm_at_t_slot_s"] = AT_T_SLOT_S
    if AHEAD in windows and AFTER in windows:
        for w in (AHEAD, AFTER):
            w_lo, w_hi = windows[w]
            out[f"{w}_wall_s"] = float(w_hi) - float(w_lo)
            out[f"{w}_cpu_s"] = {c: v.get(w, [0.0])[0] / 1000 for c, v in cats.items()}
            out[f"{w}_machine_busy_s"] = float(d["machine_busy_ms"].get(w, 0.0)) / 1000
        out["unknown_postgres_s"] = sum(
            out[f"{w}_cpu_s"].get("postgres for ?", 0.0) for w in (AHEAD, AFTER)
        )
    return out


def storm_cpu(path: Path, at_t: dict[str, Any]) -> dict[str, float]:
    """CPU seconds per run of each step of the storm the model runs, thread by thread, from
    a burst sampled from the scan-ahead's start to past its last finish (`at_t`, from
    `storm_at_t`; the burst's own JSON gives the runs, its idle phase the broker's idle
    rate and its after phase's length); the CPU per second the rest of the machine took in
    the scan-ahead (other stacks and agents, the benchmark's polls and their backend,
    PostgreSQL's own processes, the services' other threads, the broker's idle work), the
    sampler left out; and what the second cost."""
    import json

    r = json.loads(path.read_text())
    phases = r.get("cpu_by_phase_s")
    if not phases or not {"idle", "ahead", "after"} <= set(phases):
        raise SystemExit(f"--storm-cpu: {path} has no cpu_by_phase_s with idle, ahead and after")
    if f"{AHEAD}_cpu_s" not in at_t:
        raise SystemExit(
            "--storm-at-t: not sampled from the scan-ahead's start to past the last finish "
            "(benchmarks/burst_at_t.py --before 11 --after 6 --period-ms 100)"
        )
    if float(phases["after"]["wall_s"]) > at_t[f"{AFTER}_wall_s"] + 0.5:
        raise SystemExit(
            f"--storm-at-t: sampled {at_t[f'{AFTER}_wall_s']:.1f} s after T, the finishes "
            f"took {float(phases['after']['wall_s']):.1f} s: sample longer (--after)"
        )
    runs = int(r["succeeded"])
    # the broker's own rate with no storm (the burst's idle phase): not a run's cost
    idle = phases["idle"]
    broker_idle_per_s = float(idle["kafka_broker"]) / float(idle["wall_s"])
    out: dict[str, float] = {}
    modelled = 0.0
    for key, (window, pattern) in STORM_STEPS.items():
        cpu: dict[str, float] = at_t[f"{window}_cpu_s"]
        used = sum(v for c, v in cpu.items() if re.fullmatch(pattern, c))
        if window == AHEAD:
            modelled += used
        if pattern == "broker":
            used = max(0.0, used - broker_idle_per_s * at_t[f"{window}_wall_s"])
        out[key] = used / runs
    ahead: dict[str, float] = at_t[f"{AHEAD}_cpu_s"]
    modelled += sum(v for c, v in ahead.items() if AHEAD_ALSO_MODELLED.fullmatch(c))
    other = at_t[f"{AHEAD}_machine_busy_s"] - modelled - ahead.get("sampler", 0.0)
    # the rest of the machine includes the broker's idle rate (taken out of its step)
    other += broker_idle_per_s * at_t[f"{AHEAD}_wall_s"]
    out["storm_other_cpu_per_s"] = max(0.0, other) / at_t[f"{AHEAD}_wall_s"]
    out["storm_at_t_start_cpu_per_run_s"] = at_t["hold_cpu_s"] / runs
    out["storm_at_t_cpu_s"] = at_t["storm_at_t_cpu_s"]
    out["storm_at_t_window_s"] = at_t["storm_at_t_window_s"]
    for k, v in at_t.items():
        if k.startswith("storm_at_t_slot_"):
            out[k] = v
    return out


def median_by_key(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each key's median over the sampled runs that have it. One run's storm can carry
    what is not the kit's (an autovacuum at T, a heartbeat in the starts: sitting 7 of
    2026-12-04 took its model 17 % high from one such run); a median of three does not."""
    keys = sorted({k for r in runs for k in r})
    return {k: statistics.median([r[k] for r in runs if k in r]) for k in keys}


def update_profile(
    path: Path,
    numbers: dict[str, float],
    starts: int,
    storm: dict[str, float] | None = None,
    storm_source: str | None = None,
    starts_measured: bool = True,
    notes: Mapping[str, str] | None = None,
) -> None:
    """Set these service times in an existing profile, the others kept as they were
    measured; the [measured] table (the last one) says where the new ones come from."""
    if not path.exists():
        raise SystemExit(f"--out: no such profile {path} (run a full calibration first)")
    numbers = {**numbers, **(storm or {})}
    out: list[str] = []
    section = ""
    for line in path.read_text().splitlines():
        if line.startswith("["):
            section = line.strip()
        key = line.split("=", 1)[0].strip()
        drop = (
            (key == "worker_starts" and starts_measured)
            or (storm is not None and key == "storm_cpu")
            or (section == "[measured]" and key in (notes or {}))
        )
        stale_storm = storm is not None and key.startswith("storm_") and key != "storm_cpu"
        if (section == "[service_times]" and (key in numbers or stale_storm)) or drop:
            continue
        out.append(line)
        if line.strip() == "[service_times]":
            out += [f"{k} = {v:.9f}" for k, v in sorted(numbers.items())]
    if "[service_times]" not in out:
        raise SystemExit(f"--out: {path} has no [service_times] table")
    while out and not out[-1].strip():
        out.pop()
    stamp = f"{platform.node()} at {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ}"
    if starts_measured:
        out.append(f"worker_starts = {json.dumps(_starts_note(starts, stamp))}")
    if storm:
        note = (
            "storm_*: from a 50,000-run storm of the kit sampled by benchmarks/burst_at_t.py "
            "(every task's time on a core, each thread by what it does): the scan-ahead's "
            "CPU per run of each step (storm_ahead_*: the scheduler's scan, publish and "
            "librdkafka threads, PostgreSQL's backends of the scan and of the claims, the "
            "workers' main (claim) and librdkafka threads, the broker less its idle rate), "
            "the rest of the machine's CPU per second then, the hold threads' CPU per run at "
            "T and the rest's CPU from T to T + 0.3 s (storm_at_t_*), and after T the "
            "finishes' (storm_after_*: the workers' finisher threads and backends, the broker "
            f"less its idle rate): {storm_source}, set by cronfleet calibrate on {stamp}"
        )
        out.append(f"storm_cpu = {json.dumps(note)}")
    out += [f"{k} = {json.dumps(v)}" for k, v in (notes or {}).items()]
    path.write_text("\n".join(out) + "\n")


def write_profile(
    path: Path,
    numbers: Mapping[str, float],
    notes: Mapping[str, str],
    history: Mapping[str, float] | None = None,
) -> None:
    """The profile: [service_times] (seconds), [history] (bytes), and [measured]: how and
    when each group of keys was measured (`notes`: group -> text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Calibration profile: service times (seconds) the model charges for each",
        "# statement, row, message and fire, and the bytes a run row takes in the run",
        "# history. Written by `cronfleet calibrate`; [measured] says how and when.",
        "[service_times]",
    ]
    lines += [f"{k} = {v:.9f}" for k, v in sorted(numbers.items())]
    if history:
        lines += ["", "[history]"]
        lines += [f"{k} = {v:.1f}" for k, v in sorted(history.items())]
    lines += ["", "[measured]"]
    lines += [f"{k} = {json.dumps(v, ensure_ascii=False)}" for k, v in notes.items() if v]
    lines.append("")
    path.write_text("\n".join(lines))
