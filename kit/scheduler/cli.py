"""`cronfleet scheduler`: run one scheduler node until SIGTERM/SIGINT.

On SIGTERM the node stops scanning, dispatches the runs it holds at their second,
releases its partition leases and leaves the membership table, then exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "scheduler",
        help="run a scheduler node (partition leases, scan ahead, dispatch to Kafka)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--node-id", default=None, help="default: hostname-pid")
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="Prometheus port (0 = no endpoint)"
    )
    parser.add_argument(
        "--topic-prefix", default=None, help="run topic prefix (default cronfleet.runs)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kit.core.errors import UsageError
    from kit.scheduler.node import NodeConfig, SchedulerNode, scheduler_engine
    from kit.settings import load_settings
    from kit.store.shards import require_usable
    from kit.transport import DEFAULT_TOPIC_PREFIX, RunPublisher, ensure_topics

    if not 0 <= args.metrics_port <= 65535:
        raise UsageError("--metrics-port: must be between 0 and 65535")
    node_id = args.node_id or f"{socket.gethostname()}-{os.getpid()}"
    if not node_id.strip():
        raise UsageError("--node-id: must not be empty")
    settings = load_settings()
    require_usable(settings.shards())  # every shard answers, at one revision
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    prefix = args.topic_prefix or DEFAULT_TOPIC_PREFIX
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port)
    ensure_topics(
        settings.kafka_bootstrap,
        settings.run_topic_partitions,
        replication_factor=settings.run_topic_replication,
        min_insync_replicas=settings.run_topic_min_insync,
        prefix=prefix,
    )
    config = NodeConfig.from_settings(settings)
    engine = scheduler_engine(settings.database_url, config)
    publisher = RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix)
    node = SchedulerNode(engine, publisher, node_id, config)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger(__name__).info("scheduler node %s starting", node_id)
    node.start()
    stop.wait()
    logging.getLogger(__name__).info("scheduler node %s stopping", node_id)
    node.stop()
    publisher.close()
    engine.dispose()
    return 0


if __name__ == "__main__":
    import sys

    top = argparse.ArgumentParser(prog="python -m kit.scheduler.cli")
    register(top.add_subparsers(dest="command"))
    parsed = top.parse_args(["scheduler", *sys.argv[1:]])
    sys.exit(parsed.func(parsed))
