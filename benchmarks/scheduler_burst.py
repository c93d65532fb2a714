"""Scheduler burst: N one-off jobs all due at the same second, K scheduler nodes (threads
in this process), real PostgreSQL and Kafka of the local stack. Prints scan durations
and dispatch lag (scheduled time -> dispatched_at, the database's clock), and how many
runs were fired, left undispatched and published twice.

    python benchmarks/scheduler_burst.py --jobs 50000 --nodes 2

A scratch database (migrated with the project's Alembic) and unique topics are used;
the database is dropped at the end. Not a test: figures, not asserts.
"""

from __future__ import annotations

import argparse
import statistics
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


def count_messages(bootstrap: str, prefix: str) -> Counter:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    seen: Counter = Counter()
    for tier in PRIORITY_TIERS:
        tp = TopicPartition(topic_for(tier, prefix), 0, 0)
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--lead-s", type=int, default=12, help="burst second = now + lead")
    args = ap.parse_args()
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
        prefix = f"cf_bench_sched.{uuid.uuid4().hex[:8]}"
        ensure_topics(settings.kafka_bootstrap, 1, prefix=prefix)
        pubs = [RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix) for _ in range(2)]
        nodes = [
            SchedulerNode(engine, pubs[i % 2], f"bench-{i}", NodeConfig())
            for i in range(args.nodes)
        ]
        scans: list[tuple[float, int]] = []
        for node in nodes:
            original = node.scan_once

            def timed(now=None, _orig=original):  # type: ignore[no-untyped-def]
                s = time.perf_counter()
                r = _orig(now)
                if r.triggers:
                    scans.append((time.perf_counter() - s, r.triggers))
                return r

            node.scan_once = timed  # type: ignore[method-assign]
            node.start()
        deadline = time.monotonic() + args.lead_s + 60
        done = 0
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                done = conn.execute(
                    text("SELECT count(*) FROM runs WHERE dispatched_at IS NOT NULL")
                ).scalar_one()
            if done >= args.jobs:
                break
            time.sleep(0.5)
        for node in nodes:
            node.stop()
        with engine.connect() as conn:
            lags = [
                r[0]
                for r in conn.execute(
                    text(
                        "SELECT extract(epoch FROM dispatched_at - scheduled_at) FROM runs "
                        "WHERE dispatched_at IS NOT NULL"
                    )
                )
            ]
            total = conn.execute(text("SELECT count(*) FROM runs")).scalar_one()
        sent = count_messages(settings.kafka_bootstrap, prefix)
        lag = [float(x) for x in lags]
        print(
            f"command: python benchmarks/scheduler_burst.py --jobs {args.jobs} --nodes {args.nodes}"
        )
        print(
            f"runs inserted {total}, dispatched {len(lag)}, messages {sum(sent.values())}, "
            f"published twice {sum(1 for v in sent.values() if v > 1)}, "
            f"missing {args.jobs - total}"
        )
        if scans:
            per = [d for d, _ in scans]
            print(
                f"scans with triggers: {len(scans)}, rows {[n for _, n in scans]}, "
                f"duration mean {statistics.mean(per):.3f} s max {max(per):.3f} s"
            )
        print(
            f"dispatch lag s: p50 {pct(lag, 0.5):.3f} p99 {pct(lag, 0.99):.3f} "
            f"max {max(lag, default=float('nan')):.3f}"
        )
        for p in pubs:
            p.close()
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    return 0


if __name__ == "__main__":
    sys.exit(main())
