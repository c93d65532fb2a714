"""`cronfleet reaper [--metrics-port N]`: the reaper service."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reaper", help="re-queue runs whose lease expired, publish runs never dispatched"
    )
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0: off)")
    parser.add_argument("--topic-prefix", default=None, help="run topic prefix (tests)")
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.add_argument(
        "--group-id", help="the workers' Kafka consumer group, whose progress it reads"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import logging
    import signal
    import threading

    from prometheus_client import start_http_server

    from kit.core.errors import UsageError
    from kit.reaper.reaper import Reaper, ReaperMetrics
    from kit.settings import load_settings
    from kit.store.db import engine_for
    from kit.store.shards import require_usable
    from kit.transport import RunPublisher
    from kit.transport.message import DEFAULT_TOPIC_PREFIX
    from kit.transport.progress import QueueProgress

    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"metrics-port: {args.metrics_port} is not between 0 and 65535")
    settings = load_settings()
    require_usable(settings.shards())  # every shard answers, at one revision
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(message)s")
    metrics = ReaperMetrics()
    if args.metrics_port:
        start_http_server(args.metrics_port, registry=metrics.registry)
    engine = engine_for(settings.database_url, pool_size=2)
    prefix = args.topic_prefix or DEFAULT_TOPIC_PREFIX
    publisher = RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix)
    progress = QueueProgress(
        settings.kafka_bootstrap, args.group_id or settings.worker_group, topic_prefix=prefix
    )
    reaper = Reaper(
        engine,
        publisher,
        settings.unclaimed_grace_ms,
        metrics,
        progress=progress,
        partitions=settings.partitions,
        pause_after_dead_default=settings.pause_after_dead,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        if args.once:
            reaper.tick()
        else:
            reaper.run(stop, settings.reaper_period_ms)
    finally:
        progress.close()
        publisher.close()
        engine.dispose()
    return 0


if __name__ == "__main__":  # `python -m kit.reaper.cli ...` == `cronfleet reaper ...`
    import sys

    from kit.cli import main

    raise SystemExit(main(["reaper", *sys.argv[1:]]))
