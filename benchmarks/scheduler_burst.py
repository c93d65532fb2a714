"""Scheduler burst: N one-off jobs all due at the same second, K scheduler nodes (threads
in this process), real PostgreSQL and Kafka of the local stack. Prints scan durations
and dispatch lag (the broker's append timestamp of each run's message minus its scheduled
time: negative when published ahead of the second, as the node does; docs/life-of-a-run.md
"Lags"), and how many runs were fired, left unpublished and published twice.

With --workers W, W `cronfleet worker` processes (noop tasks) consume the burst and the
start lag (started_at - scheduled time: the task's first instruction on the worker, by its
estimate of the database's clock) is printed too.

    python benchmarks/scheduler_burst.py --jobs 50000 --nodes 1 --workers 2

A scratch database (migrated with the project's Alembic) and unique topics are used;
the database is dropped at the end. Not a test: figures, not asserts.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import timedelta

from confluent_kafka import Consumer, TopicPartition
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from kit.core.dispatch import PRIORITY_TIERS
from kit.core.policies import MisfirePolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import OneOffSchedule
from kit.scheduler.node import NodeConfig, SchedulerNode
from kit.settings import load_settings
from kit.store import migrate
from kit.store.db import engine_for
from kit.store.jobs import JobSpec, jobs_create_batch
from kit.transport import RunMessage, RunPublisher, ensure_topics, topic_for


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def count_messages(bootstrap: str, prefix: str, partitions: int) -> Counter:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    seen: Counter = Counter()
    for tier in PRIORITY_TIERS:
        for part in range(partitions):
            tp = TopicPartition(topic_for(tier, prefix), part, 0)
            _lo, high = consumer.get_watermark_offsets(tp, timeout=10)
            if not high:
                continue
            consumer.assign([tp])
            got = 0
            while got < high:
                msg = consumer.poll(5)
                if msg is None:
                    break
                if msg.error():
                    continue
                seen[RunMessage.from_bytes(msg.value()).run_id] += 1
                got += 1
    consumer.close()
    return seen


def start_workers(
    n: int, concurrency: int, url: str, prefix: str, src: str | None
) -> list[subprocess.Popen]:
    """`cronfleet worker` processes on the scratch database and the bench topics (from
    the checkout `src` when given: before/after comparisons)."""
    env = {**os.environ, "CRONFLEET_DATABASE_URL": url, "CRONFLEET_LOG_LEVEL": "WARNING"}
    if src:
        env["PYTHONPATH"] = src
    group = f"bench-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "kit.cli", "worker", "--topic-prefix", prefix]
    cmd += ["--group-id", group, "--concurrency", str(concurrency), "--drain-s", "5"]
    return [subprocess.Popen([*cmd, "--worker-id", f"bench-w{i}"], env=env) for i in range(n)]


def stop_workers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def lags(conn, column: str) -> list[float]:  # type: ignore[no-untyped-def]
    sql = f"SELECT extract(epoch FROM {column} - scheduled_at) FROM runs WHERE {column} IS NOT NULL"
    return [float(r[0]) for r in conn.execute(text(sql))]


def line(name: str, values: list[float]) -> str:
    return (
        f"{name} s: p50 {pct(values, 0.5):.3f} p99 {pct(values, 0.99):.3f} "
        f"max {max(values, default=float('nan')):.3f} (n={len(values)})"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--lead-s", type=int, default=12, help="burst second = now + lead")
    ap.add_argument("--workers", type=int, default=0, help="worker processes (0: none)")
    ap.add_argument("--concurrency", type=int, default=1024, help="per worker")
    ap.add_argument("--partitions", type=int, default=0, help="per tier topic (0: workers)")
    ap.add_argument("--worker-src", help="run the workers from this checkout instead")
    args = ap.parse_args()
    partitions = args.partitions or max(1, args.workers)
    workers: list[subprocess.Popen] = []
    settings = load_settings()
    admin_url = make_url(settings.database_url)
    name = f"cf_bench_sched_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = admin_url.set(database=name).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        engine = engine_for(url, pool_size=8)
        prefix = f"cf_bench_sched.{uuid.uuid4().hex[:8]}"
        ensure_topics(settings.kafka_bootstrap, partitions, prefix=prefix)
        if args.workers:  # first, so they have joined their groups when the burst comes
            workers = start_workers(args.workers, args.concurrency, url, prefix, args.worker_src)
        with engine.connect() as conn:
            now = conn.execute(text("SELECT now()")).scalar_one()
        burst = (now + timedelta(seconds=args.lead_s)).replace(microsecond=0)
        spec = JobSpec(
            name="x",
            schedule=OneOffSchedule(burst),
            task={"type": "noop"},
            retry=RetryPolicy().to_dict(),
            misfire=MisfirePolicy().to_dict(),
        )
        t0 = time.perf_counter()
        specs = [JobSpec(**{**spec.__dict__, "name": f"b{i}"}) for i in range(args.jobs)]
        jobs_create_batch(engine, "bench", specs, now=now)
        print(f"created {args.jobs} jobs in {time.perf_counter() - t0:.1f} s, due at {burst}")
        pubs = [RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix) for _ in range(2)]
        acked: dict[str, int] = {}  # run id -> the broker's append time, epoch ms
        for pub in pubs:
            encoded = pub.publish_encoded

            def acking(messages, timeout_s=10.0, _orig=encoded):  # type: ignore[no-untyped-def]
                got = _orig(messages, timeout_s)
                acked.update(got)
                return got

            pub.publish_encoded = acking  # type: ignore[method-assign]
        due_ms: dict[str, int] = {}
        nodes = [
            SchedulerNode(engine, pubs[i % 2], f"bench-{i}", NodeConfig())
            for i in range(args.nodes)
        ]
        scans: list[tuple[float, int]] = []
        publish_lag: list[float] = []  # due -> delivery confirmed, per run
        for node in nodes:
            original = node.scan_once

            def timed(now=None, _orig=original):  # type: ignore[no-untyped-def]
                s = time.perf_counter()
                r = _orig(now)
                if r.triggers:
                    scans.append((time.perf_counter() - s, r.triggers))
                return r

            node.scan_once = timed  # type: ignore[method-assign]
            publish = node._publish

            def published(runs, _orig=publish):  # type: ignore[no-untyped-def]
                ok = _orig(runs)
                done_ms = time.time_ns() // 1_000_000  # the node's clock, after the flush
                publish_lag.extend((done_ms - r.due_ms) / 1000 for r in ok)
                due_ms.update((r.run_id, r.due_ms) for r in ok)
                return ok

            node._publish = published  # type: ignore[method-assign]
            node.start()
        deadline = time.monotonic() + args.lead_s + 120
        done = 0
        wanted = (
            "SELECT count(*) FROM runs WHERE status = 'succeeded'"
            if workers
            else None  # no workers: until every run's message was acknowledged
        )
        while time.monotonic() < deadline:
            if wanted is None:
                done = len(acked)
            else:
                with engine.connect() as conn:
                    done = conn.execute(text(wanted)).scalar_one()
            if done >= args.jobs:
                break
            time.sleep(0.5)
        for node in nodes:
            node.stop()
        stop_workers(workers)
        workers = []
        with engine.connect() as conn:
            start = lags(conn, "started_at")
            total = conn.execute(text("SELECT count(*) FROM runs")).scalar_one()
            statuses = dict(
                conn.execute(text("SELECT status, count(*) FROM runs GROUP BY status")).all()
            )
            retried = conn.execute(text("SELECT count(*) FROM runs WHERE attempt > 1")).scalar()
        sent = count_messages(settings.kafka_bootstrap, prefix, partitions)
        command = f"python benchmarks/scheduler_burst.py --jobs {args.jobs} --nodes {args.nodes}"
        if args.workers:
            command += f" --workers {args.workers} --concurrency {args.concurrency}"
        print(f"command: {command}  (topic partitions {partitions}, load {os.getloadavg()})")
        print(
            f"runs inserted {total}, acknowledged {len(acked)}, messages {sum(sent.values())}, "
            f"published twice {sum(1 for v in sent.values() if v > 1)}, "
            f"missing {args.jobs - total}, statuses {statuses}, attempt > 1: {retried}"
        )
        if scans:
            per = [d for d, _ in scans]
            print(
                f"scans with triggers: {len(scans)}, rows {[n for _, n in scans]}, "
                f"duration mean {statistics.mean(per):.3f} s max {max(per):.3f} s"
            )
        lag = [(acked[r] - due_ms[r]) / 1000 for r in due_ms if r in acked]
        print(line("publish flush (node's clock after the flush - due)", publish_lag))
        print(line("dispatch lag (broker append time - due; negative = ahead)", lag))
        if args.workers:
            print(line("start lag", start))
            steps = Counter(min(int(x * 2), 20) for x in start)
            print(
                "started per 0.5 s after the second: "
                + " ".join(f"{k / 2:g}s:{steps[k]}" for k in sorted(steps))
            )
        for p in pubs:
            p.close()
        engine.dispose()
    finally:
        stop_workers(workers)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    return 0


if __name__ == "__main__":
    sys.exit(main())
