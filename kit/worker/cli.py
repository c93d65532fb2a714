"""`cronfleet worker [--worker-id] [--concurrency N] [--metrics-port N]`: a worker.

SIGTERM (or SIGINT): stop consuming, let in-flight runs finish for up to --drain-s,
then cancel the rest and release their leases to the reaper, and exit 0. Closing the
Kafka clients is bounded (`CLOSE_BOUND_S`): past it, every thread's stack goes to
stderr and the worker exits 1. A worker whose consumer was fenced (another took its
--worker-id, or a broker stall outlived its session) drains the same way and exits 1
without closing that consumer.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("worker", help="consume the run queue and execute runs")
    parser.add_argument(
        "--worker-id",
        help="this worker's stable name, unique in the fleet (a systemd instance, a pod's "
        "name): it joins the consumer group as a static member, so a restart within the "
        "session takes its partitions back without stopping the other workers. Default: "
        "host-pid, a dynamic member",
    )
    parser.add_argument("--concurrency", type=int, help="runs executed at once (default: settings)")
    parser.add_argument(
        "--prefetch", type=int, help="runs claimed ahead of their second (default: settings)"
    )
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0: off)")
    parser.add_argument("--drain-s", type=float, default=30.0, help="shutdown wait for runs")
    parser.add_argument("--group-id", help="Kafka consumer group (default: settings)")
    parser.add_argument("--topic-prefix", default=None, help="run topic prefix (tests)")
    parser.add_argument(
        "--no-fair-share",
        action="store_true",
        help="hand slots to runs first come, first served, whatever their tenant "
        "(docs/tenants.md, Fair shares; the comparison's baseline)",
    )
    parser.set_defaults(func=_run)


CLOSE_BOUND_S = 30.0  # closing the consumers, the publisher's flush (10 s), the database pool


def _run(args: argparse.Namespace) -> int:
    import faulthandler
    import logging
    import os
    import signal
    import socket
    import threading
    from pathlib import Path

    from prometheus_client import start_http_server

    from kit.core.durations import LeaseBounds
    from kit.core.errors import UsageError
    from kit.settings import load_settings
    from kit.store.db import engine_for
    from kit.store.shards import require_usable
    from kit.tasks.policy import policy_source
    from kit.tasks.tenant_policy import tenant_policy_source
    from kit.transport import RunPublisher, TieredConsumer, ensure_topics
    from kit.transport.consumer import ConsumerFenced
    from kit.transport.message import DEFAULT_TOPIC_PREFIX
    from kit.worker.journal import ExecutionJournal
    from kit.worker.worker import Worker, WorkerMetrics, task_executor

    settings = load_settings()
    require_usable(settings.shards())  # every shard answers, at one revision
    concurrency = args.concurrency if args.concurrency is not None else settings.worker_concurrency
    if not 1 <= concurrency <= 1024:
        raise UsageError(f"concurrency: {concurrency} is not between 1 and 1024")
    prefetch = args.prefetch if args.prefetch is not None else settings.worker_prefetch
    if not 1 <= prefetch <= 1_000_000:
        raise UsageError(f"prefetch: {prefetch} is not between 1 and 1000000")
    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"metrics-port: {args.metrics_port} is not between 0 and 65535")
    if args.drain_s < 0:
        raise UsageError("drain-s: must not be negative")
    # the operator's tenant policy (kit.core.tenancy): a bad file stops the worker here;
    # `tenants.current` is what the worker's shares and limits read
    tenants = tenant_policy_source(settings.tenant_policy_file)
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}"
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(message)s")
    prefix = args.topic_prefix or DEFAULT_TOPIC_PREFIX
    metrics = WorkerMetrics()
    if args.metrics_port:
        start_http_server(args.metrics_port, registry=metrics.registry)
    ensure_topics(
        settings.kafka_bootstrap,
        settings.run_topic_partitions,
        replication_factor=settings.run_topic_replication,
        min_insync_replicas=settings.run_topic_min_insync,
        prefix=prefix,
    )
    engine = engine_for(settings.database_url, pool_size=min(concurrency + 2, 20))
    group = args.group_id or settings.worker_group
    consumer = TieredConsumer(
        settings.kafka_bootstrap,
        group,
        topic_prefix=prefix,
        session_timeout_ms=settings.worker_session_timeout_ms,
        instance_id=args.worker_id,  # only a name given is stable across restarts
    )
    publisher = RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix)
    journal = None
    if settings.execution_journal_dir:
        path = Path(settings.execution_journal_dir) / f"{worker_id}.journal"
        journal = ExecutionJournal(path, worker_id)
    worker = Worker(
        engine,
        consumer,
        publisher,
        worker_id,
        concurrency,
        settings.run_lease_ttl_ms,
        lease_bounds=LeaseBounds(settings.run_lease_min_ms, settings.run_lease_max_ms),
        partitions=settings.partitions,
        execute=task_executor(
            policy_source(settings.task_policy_file, settings.http_allow_hosts),
            settings.secret_values(),
        ),
        metrics=metrics,
        prefetch=prefetch,
        journal=journal,
        pause_after_dead_default=settings.pause_after_dead,
        fair_share=not args.no_fair_share,
        tenants=tenants.current,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # `kill -USR2 PID` logs what the consumer holds, has read and is assigned (a stuck
    # worker's other half beside SIGUSR1's stacks: kit.cli).
    signal.signal(signal.SIGUSR2, lambda *_: worker.describe_wanted.set())
    logging.getLogger(__name__).info(
        "worker %s started (concurrency %d, %d tenants named by the tenant policy)",
        worker_id,
        concurrency,
        len(tenants.current().tenants),
    )
    fenced = False
    try:
        worker.run(stop, drain_s=args.drain_s)
    except ConsumerFenced as exc:  # another worker took this id: say so, exit non-zero
        logging.getLogger(__name__).error("worker %s stops: %s", worker_id, exc)
        fenced = True
    finally:
        # Closing must not keep the process alive: a worker alive but not consuming keeps
        # its partitions from every other worker. Past the bound: stacks to stderr, exit 1;
        # what it held goes back through the reaper.
        faulthandler.dump_traceback_later(CLOSE_BOUND_S, exit=True)
        if not fenced:
            consumer.close()
        publisher.close()
        engine.dispose()
        faulthandler.cancel_dump_traceback_later()
    if fenced:
        # A fenced consumer is never closed: its close() can hang for good (a rebalance
        # callback's assign() meets the group's termination, confluentinc/librdkafka#4884;
        # the chaos drill broker-stall caught it), and a fenced static member has nothing
        # left to commit or leave. os._exit, not return: the handle's teardown closes it.
        logging.shutdown()
        os._exit(1)
    return 0


if __name__ == "__main__":  # `python -m kit.worker.cli ...` == `cronfleet worker ...`
    import sys

    from kit.cli import main

    raise SystemExit(main(["worker", *sys.argv[1:]]))
