"""`cronfleet calibrate`: measure on the real local stack (from `cronfleet stack up`) the
service times the capacity model charges, and write a calibration profile.

It uses scratch tables of the same shape as the kit's `triggers` and `runs` in its own
schema (dropped afterwards) and a scratch Kafka topic, so it does not depend on the
store's migrations. Per-row costs come from a least-squares fit of batch time against
batch size (intercept = per-statement cost, slope = per-row cost).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import platform
import re
import statistics
import time
import uuid
from pathlib import Path

from kit.transport.kafka_client import client_config

SCHEMA = "cronfleet_calibrate"
TOPIC = "cronfleet-calibrate"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="measure service times for the capacity model")
    p.add_argument("--out", default="sim/profiles/measured.toml", help="profile to write")
    p.add_argument("--rows", type=int, default=100_000, help="triggers in the scratch table")
    p.add_argument(
        "--history-rows",
        type=int,
        default=100_000,
        help="finished runs written to measure the bytes a run row takes",
    )
    p.add_argument(
        "--only-worker-starts",
        action="store_true",
        help="measure only the worker's hold and start path (no database or broker) and "
        "update those keys of an existing profile",
    )
    p.add_argument("--starts", type=int, default=25_000, help="runs held and started at once")
    p.add_argument(
        "--storm-cpu",
        default=None,
        metavar="JSON",
        help="with --only-worker-starts: also set the storm's CPU per run by phase from a "
        "`benchmarks/life_of_a_run.py --mode burst` result (its cpu_by_phase_s)",
    )
    p.add_argument(
        "--only-storm",
        action="store_true",
        help="set only the storm's keys from --storm-cpu (and --storm-at-t), measuring "
        "nothing: the worker's start path keeps the values it was measured at",
    )
    p.add_argument(
        "--storm-at-t",
        default=None,
        metavar="JSON",
        help="with --storm-cpu: also set what the storm's second costs from the same run "
        "sampled by `benchmarks/burst_at_t.py --period-ms 100` (its all_at_t.json): the hold "
        "threads' CPU per run started, and the rest of the machine's CPU from T to T + 0.3 s",
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from kit.settings import load_settings

    if args.only_storm:
        if not args.storm_cpu:
            raise SystemExit("--only-storm: needs --storm-cpu (a burst's JSON)")
        at_t = storm_at_t(Path(args.storm_at_t)) if args.storm_at_t else None
        storm = storm_cpu(Path(args.storm_cpu), at_t)
        source = args.storm_cpu + (f" and {args.storm_at_t}" if args.storm_at_t else "")
        update_profile(Path(args.out), {}, 0, storm, source, starts_measured=False)
        for k, v in storm.items():
            print(f"  {k:<28} {v * 1e6:10.2f} us")
        print(f"updated {args.out}")
        return 0
    starts = measure_worker_starts(args.starts)
    if args.only_worker_starts:
        if args.storm_at_t and not args.storm_cpu:
            raise SystemExit("--storm-at-t: needs --storm-cpu (the same run's burst JSON)")
        at_t = storm_at_t(Path(args.storm_at_t)) if args.storm_at_t else None
        storm = storm_cpu(Path(args.storm_cpu), at_t) if args.storm_cpu else {}
        source = args.storm_cpu + (f" and {args.storm_at_t}" if args.storm_at_t else "")
        update_profile(Path(args.out), starts, args.starts, storm, source if storm else None)
        starts = {**starts, **storm}
        for k, v in starts.items():
            print(f"  {k:<28} {v * 1e6:10.2f} us")
        print(f"updated {args.out}")
        return 0
    settings = load_settings()
    url = settings.database_url.replace("postgresql+psycopg://", "postgresql://")
    print(f"database {url.split('@')[-1]}, kafka {settings.kafka_bootstrap}")
    db = measure_db(url, args.rows)
    kafka = measure_kafka(settings.kafka_bootstrap)
    history = measure_run_rows(url, args.history_rows)
    numbers = {**db, **kafka, **starts}
    write_profile(Path(args.out), numbers, args.rows, history, args.history_rows)
    for k, v in numbers.items():
        print(f"  {k:<28} {v * 1e6:10.1f} us")
    for k, v in history.items():
        print(f"  {k:<28} {v:10.0f} bytes")
    print(f"wrote {args.out}")
    return 0


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of time against rows, both floored at zero."""
    xs = [float(x) for x, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return max(0.0, my - slope * mx), max(0.0, slope)


def measure_db(url: str, rows: int) -> dict[str, float]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(
            f"""CREATE TABLE {SCHEMA}.triggers (
                partition_id int NOT NULL, fire_at timestamptz NOT NULL, job_id text NOT NULL,
                job_version int NOT NULL DEFAULT 1, kind text NOT NULL DEFAULT 'cron',
                attempt int NOT NULL DEFAULT 1, PRIMARY KEY (partition_id, fire_at, job_id))"""
        )
        conn.execute(
            f"""CREATE TABLE {SCHEMA}.runs (
                run_id uuid PRIMARY KEY, job_id text NOT NULL, scheduled_at timestamptz NOT NULL,
                attempt int NOT NULL DEFAULT 1, status text NOT NULL DEFAULT 'pending',
                lease_token text, lease_expires_at timestamptz, worker_id text,
                dispatched_at timestamptz, started_at timestamptz, finished_at timestamptz,
                error text)"""
        )
        base = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY {SCHEMA}.triggers (partition_id, fire_at, job_id) FROM STDIN") as copy,
        ):
            for i in range(rows):
                copy.write_row((i % 1024, base + dt.timedelta(milliseconds=i * 5), f"job-{i}"))
        conn.execute(f"ANALYZE {SCHEMA}.triggers")
        out: dict[str, float] = {}
        # batched scan + advance: a node's partitions, everything due up to a horizon
        parts = list(range(0, 1024, 8))  # 128 partitions: one node of eight
        scan_points, per_part_points = [], []
        horizon = base
        for size in (500, 1000, 2000, 4000, 8000, 16000) * 2:
            horizon = horizon + dt.timedelta(milliseconds=size * 5 * 8)
            t = time.perf_counter()
            with conn.transaction():
                n = conn.execute(
                    f"""WITH due AS (
                          SELECT partition_id, fire_at, job_id FROM {SCHEMA}.triggers
                          WHERE partition_id = ANY(%s) AND fire_at <= %s
                          FOR UPDATE SKIP LOCKED)
                        UPDATE {SCHEMA}.triggers t SET fire_at = t.fire_at + interval '1 day'
                        FROM due WHERE t.partition_id = due.partition_id
                          AND t.fire_at = due.fire_at AND t.job_id = due.job_id""",
                    (parts, horizon),
                ).rowcount
            scan_points.append((n, time.perf_counter() - t))
        for k in (16, 64, 256, 1024):  # empty scans over k partitions: per-partition cost
            t = time.perf_counter()
            conn.execute(
                f"SELECT count(*) FROM {SCHEMA}.triggers WHERE partition_id = ANY(%s) "
                "AND fire_at <= %s",
                (list(range(k)), base - dt.timedelta(days=1)),
            )
            per_part_points.append((k, time.perf_counter() - t))
        _, out["db_scan_advance_per_row_s"] = _fit(scan_points)
        stmt, out["db_per_partition_s"] = _fit(per_part_points)
        # run insert (deterministic ids, ON CONFLICT DO NOTHING) and the dispatched mark
        ins_points, mark_points, ids_all = [], [], []
        for size in (500, 1000, 2000, 4000, 8000) * 2:
            ids = [uuid.uuid4() for _ in range(size)]
            ids_all += ids
            t = time.perf_counter()
            conn.execute(
                f"""INSERT INTO {SCHEMA}.runs (run_id, job_id, scheduled_at)
                    SELECT id, 'job', %s FROM unnest(%s::uuid[]) AS id
                    ON CONFLICT DO NOTHING""",
                (base, ids),
            )
            ins_points.append((size, time.perf_counter() - t))
            t = time.perf_counter()
            conn.execute(
                f"UPDATE {SCHEMA}.runs SET dispatched_at = now(), status = 'dispatched' "
                "WHERE run_id = ANY(%s)",
                (ids,),
            )
            mark_points.append((size, time.perf_counter() - t))
        _, out["db_run_insert_per_row_s"] = _fit(ins_points)
        _, out["db_dispatch_mark_per_row_s"] = _fit(mark_points)
        out["db_statement_s"] = stmt  # an index probe that finds nothing: the round trip
        # claim and finish: one statement each, as a worker does them (latency), and the
        # same statements pipelined (no round trip between them: the database's own work)
        sample = ids_all[:3000]
        claim_sql = (
            f"UPDATE {SCHEMA}.runs SET status = 'running', lease_token = %s, worker_id = 'w', "
            "lease_expires_at = now() + interval '30 s', started_at = now() "
            "WHERE run_id = %s AND status IN ('pending', 'dispatched') AND attempt = 1"
        )
        finish_sql = (
            f"UPDATE {SCHEMA}.runs SET status = 'succeeded', finished_at = now(), "
            "lease_token = NULL WHERE run_id = %s AND lease_token = %s"
        )
        lat_c, lat_f = [], []
        for rid in sample[:1000]:
            t = time.perf_counter()
            conn.execute(claim_sql, (f"t{rid}", rid))
            lat_c.append(time.perf_counter() - t)
            t = time.perf_counter()
            conn.execute(finish_sql, (rid, f"t{rid}"))
            lat_f.append(time.perf_counter() - t)
        out["claim_s"] = statistics.median(lat_c)
        out["finish_s"] = statistics.median(lat_f)
        batch = sample[1000:3000]
        with conn.cursor() as cur:
            t = time.perf_counter()
            cur.executemany(claim_sql, [(f"t{r}", r) for r in batch])
            out["db_claim_demand_s"] = (time.perf_counter() - t) / len(batch)
            t = time.perf_counter()
            cur.executemany(finish_sql, [(r, f"t{r}") for r in batch])
            out["db_finish_demand_s"] = (time.perf_counter() - t) / len(batch)
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    return out


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


def measure_kafka(bootstrap: str) -> dict[str, float]:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**client_config(bootstrap)})
    admin.delete_topics([TOPIC], operation_timeout=10)
    time.sleep(1.0)
    fut = admin.create_topics([NewTopic(TOPIC, num_partitions=4, replication_factor=1)])
    for f in fut.values():
        with contextlib.suppress(Exception):
            f.result(10)
    producer = Producer({**client_config(bootstrap), "linger.ms": 5, "acks": "all"})
    payload = b"x" * 300
    n = 50_000
    t = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(TOPIC, payload, key=str(i % 997).encode())
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(30)
    per_msg = (time.perf_counter() - t) / n
    # ack latency of one message at a time
    acks: list[float] = []
    for _ in range(200):
        t0 = time.perf_counter()
        producer.produce(
            TOPIC, payload, on_delivery=lambda e, m, t0=t0: acks.append(time.perf_counter() - t0)
        )
        producer.flush(10)
    consumer = Consumer(
        {
            **client_config(bootstrap),
            "group.id": f"cal-{uuid.uuid4()}",
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.subscribe([TOPIC])
    deadline = time.time() + 20
    while not consumer.assignment() and time.time() < deadline:
        consumer.poll(0.2)
    e2e: list[float] = []
    for i in range(200):
        marker = f"m{i}".encode()
        t0 = time.perf_counter()
        producer.produce(TOPIC, marker)
        producer.flush(10)
        while time.perf_counter() - t0 < 5:
            msg = consumer.poll(0.05)
            if msg is not None and not msg.error() and msg.value() == marker:
                e2e.append(time.perf_counter() - t0)
                break
    consumer.close()
    admin.delete_topics([TOPIC], operation_timeout=10)
    pub = statistics.median(acks)
    return {
        "kafka_publish_per_msg_s": per_msg,
        "kafka_publish_latency_s": pub,
        "kafka_consume_latency_s": max(0.0, statistics.median(e2e) - pub) if e2e else pub,
    }


def measure_worker_starts(n: int, repeats: int = 5) -> dict[str, float]:
    """CPU per run of the worker's own hold-and-start path (kit.worker.Worker), for runs
    claimed ahead and due at the same second: into the hold wheel, popped from it at the
    second, started inline (noop). Runs the kit's code in this process, no database, no
    broker; the median of `repeats` rounds of n runs (one worker's share of a burst)."""
    from sqlalchemy import create_engine

    from kit.store.claims import ClaimedRun
    from kit.worker.worker import Worker, _InFlight, task_executor

    # never opened: the worker only needs one to exist
    engine = create_engine("postgresql+psycopg://calibrate@127.0.0.1:9/none", hide_parameters=True)
    due = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    add: list[float] = []
    pop: list[float] = []
    start: list[float] = []
    for _ in range(repeats):
        w = Worker(engine, None, None, "calibrate", 1024, 30_000, execute=task_executor())  # type: ignore[arg-type]
        w._pool.shutdown(wait=False)
        w.clock.observe(0.0, 0.0, 0.0)
        confirmed = time.monotonic() + 3600
        entries = [
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
                    task_spec={"type": "noop"},
                    timeout_s=None,
                ),
                confirmed_until=confirmed,
            )
            for i in range(n)
        ]
        t0 = time.perf_counter()
        w._hold(entries)
        t1 = time.perf_counter()
        with w._held_changed:
            popped = w._wheel.pop_due(int(due.timestamp() * 1000))
        t2 = time.perf_counter()
        w._execute_inline(popped)
        t3 = time.perf_counter()
        if len(popped) != n or len(w._succeeded) != n:
            raise RuntimeError("the worker did not start every held run")
        add.append((t1 - t0) / n)
        pop.append((t2 - t1) / n)
        start.append((t3 - t2) / n)
    return {
        "worker_hold_add_s": statistics.median(add),
        "worker_wheel_pop_s": statistics.median(pop),
        "worker_start_inline_s": statistics.median(start),
    }


STORM_PROCESSES = {
    "scheduler": "scheduler",
    "worker": "worker",
    "postgres": "postgres_backends",
    "broker": "kafka_broker",
}


# What the storm model runs itself at the second (burst_at_t.py's categories): the workers'
# hold and finisher threads and their PostgreSQL backends; and the sampler, which the
# compared runs do not have. The rest is charged as the machine's CPU at T.
AT_T_MODELLED = re.compile(r"worker-\d+ (hold|finisher)|postgres for worker-\d+|sampler")
AT_T_WINDOW = "T..T+0.3"


def storm_at_t(path: Path) -> dict[str, float]:
    """What the second itself costs in a storm, from `benchmarks/burst_at_t.py`'s
    all_at_t.json: the workers' hold threads' CPU (pop and start at T, as the storm's heap
    and caches make it, which the isolated measurement does not see), the CPU the rest of
    the machine takes from T to T + 0.3 s while they start, and the sampler's own CPU."""
    import json

    d = json.loads(path.read_text())
    cats = d.get("by_category_ms")
    if not cats or AT_T_WINDOW not in d.get("windows", {}):
        raise SystemExit(f"--storm-at-t: {path} has no by_category_ms over {AT_T_WINDOW}")
    hold = [c for c in cats if re.fullmatch(r"worker-\d+ hold", c)]
    if not hold:
        raise SystemExit(f"--storm-at-t: {path} names no worker's hold thread (py-spy missing?)")
    lo, hi = d["windows"][AT_T_WINDOW]
    rest = sum(v[AT_T_WINDOW][0] for c, v in cats.items() if not AT_T_MODELLED.fullmatch(c))
    return {
        "hold_cpu_s": sum(v[0] for c in hold for v in cats[c].values()) / 1000,
        "storm_at_t_cpu_s": rest / 1000,
        "storm_at_t_window_s": float(hi) - float(lo),
        "sampler_cpu_s": float(d.get("sampler_cpu_ms", 0.0)) / 1000,
    }


def storm_cpu(path: Path, at_t: dict[str, float] | None = None) -> dict[str, float]:
    """CPU seconds per run of each process in each phase of a measured storm (the
    scan-ahead up to T, after T), and the CPU per second the rest of the machine took
    meanwhile (other stacks and agents, PostgreSQL's own background processes); with the
    same run's `storm_at_t`, what its second cost (the sampler's CPU not counted)."""
    import json

    r = json.loads(path.read_text())
    phases = r.get("cpu_by_phase_s")
    if not phases or not {"ahead", "after"} <= set(phases):
        raise SystemExit(f"--storm-cpu: {path} has no cpu_by_phase_s with ahead and after")
    if not all("machine_busy" in phases[ph] for ph in ("ahead", "after")):
        raise SystemExit(f"--storm-cpu: {path} has no machine_busy (an older benchmark)")
    runs = int(r["succeeded"])
    out: dict[str, float] = {}
    other = wall = 0.0
    for phase in ("ahead", "after"):
        ph = phases[phase]
        ours = float(ph["this_benchmark"])
        for name, key in STORM_PROCESSES.items():
            used = float(ph.get(key, 0.0))
            ours += used
            out[f"storm_{phase}_{name}_cpu_per_run_s"] = used / runs
        ours += float(ph.get("reaper", 0.0))
        other += max(0.0, float(ph["machine_busy"]) - ours)
        wall += float(ph["wall_s"])
    if at_t is not None:
        other = max(0.0, other - at_t["sampler_cpu_s"])
        out["storm_at_t_start_cpu_per_run_s"] = at_t["hold_cpu_s"] / runs
        out["storm_at_t_cpu_s"] = at_t["storm_at_t_cpu_s"]
        out["storm_at_t_window_s"] = at_t["storm_at_t_window_s"]
    out["storm_other_cpu_per_s"] = other / wall
    return out


def update_profile(
    path: Path,
    numbers: dict[str, float],
    starts: int,
    storm: dict[str, float] | None = None,
    storm_source: str | None = None,
    starts_measured: bool = True,
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
        drop = (key == "worker_starts" and starts_measured) or (
            storm is not None and key == "storm_cpu"
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
        out.append(
            f'worker_starts = "worker_hold_add_s, worker_wheel_pop_s, worker_start_inline_s: '
            f"kit.worker.Worker's hold, wheel pop and inline start of {starts} noop runs due "
            f'at the same second, median of 5 rounds, measured by cronfleet calibrate on {stamp}"'
        )
    if storm:
        out.append(
            f'storm_cpu = "storm_*: CPU per run of each process in the scan-ahead up to T and '
            f"after T, the rest of the machine's CPU per second, and (storm_at_t_*) the hold "
            f"threads' CPU per run at T and the rest's CPU from T to T + 0.3 s, from the kit's "
            f"CPU of "
            f'a 50,000-run storm: {storm_source}, set by cronfleet calibrate on {stamp}"'
        )
    path.write_text("\n".join(out) + "\n")


def write_profile(
    path: Path,
    numbers: dict[str, float],
    rows: int,
    history: dict[str, float] | None = None,
    history_rows: int = 0,
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Calibration profile: service times (seconds) the model charges for each",
        "# statement, row and message, and the bytes a run row takes in the run history.",
        "# Written by `cronfleet calibrate`.",
        "[service_times]",
    ]
    lines += [f"{k} = {v:.9f}" for k, v in sorted(numbers.items())]
    if history:
        lines += ["", "[history]"]
        lines += [f"{k} = {v:.1f}" for k, v in sorted(history.items())]
    lines += [
        "",
        "[measured]",
        f'source = "cronfleet calibrate on {platform.node()} ({platform.machine()}, '
        f'{platform.python_version()}) at {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ}"',
        f'method = "scratch tables of {rows} triggers; per-row costs fitted over batch sizes; '
        "claim/finish latency = median single statement; demand = pipelined per statement; "
        'kafka: 50,000 x 300 B produce, 200 single-message acks and round trips"',
    ]
    if history:
        lines.append(
            f"history = \"{history_rows} finished runs in the kit's runs table (kit.store.schema: "
            "columns and indexes), written pending -> running -> succeeded, "
            "vacuumed; run_row_bytes = table + indexes + TOAST per row (the updates' free "
            'space kept); run_row_compact_bytes after VACUUM FULL"'
        )
    lines.append("")
    path.write_text("\n".join(lines))
