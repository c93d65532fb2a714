"""`cronfleet maintenance [--once] [--metrics-port N]`: the maintenance service.

Creates the run history's days ahead (CRONFLEET_RUN_DAYS_AHEAD) and drops those past
CRONFLEET_RUN_RETENTION_S; expires idempotency keys, finished queue tasks, dead letters,
audit entries, console sessions and stale worker rows under their
CRONFLEET_*_RETENTION_S settings, every CRONFLEET_MAINTENANCE_PERIOD_MS; and sends the
failure notifications due every CRONFLEET_NOTIFY_PERIOD_MS (kit.maintenance.notifier).
SIGTERM or SIGINT stops it after the current batch.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "maintenance",
        help="expire idempotency keys, finished queue tasks, dead letters past retention",
    )
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0: off)")
    parser.add_argument("--once", action="store_true", help="one pass, print what it did, exit")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import logging
    import signal
    import threading

    from prometheus_client import start_http_server

    from kit.core.errors import UsageError
    from kit.maintenance.notifier import Notifier
    from kit.maintenance.service import Maintenance, MaintenanceMetrics, retention_of
    from kit.settings import load_settings
    from kit.store.db import engine_for
    from kit.store.shards import require_usable
    from kit.tasks.policy import policy_source

    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"metrics-port: {args.metrics_port} is not between 0 and 65535")
    settings = load_settings()
    require_usable(settings.shards())  # every shard answers, at one revision
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(message)s")
    metrics = MaintenanceMetrics()
    if args.metrics_port:
        start_http_server(args.metrics_port, registry=metrics.registry)
    engine = engine_for(settings.database_url, pool_size=2)
    service = Maintenance(
        engine, retention_of(settings), metrics, run_days_ahead=settings.run_days_ahead
    )
    notifier = Notifier(
        engine,
        policy_source(settings.task_policy_file, settings.http_allow_hosts),
        metrics.registry,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        if args.once:
            expired = service.tick()
            history = service.last_history
            print(f"run days created: {', '.join(map(str, history.created)) or 'none'}")
            for dropped in history.dropped:
                print(
                    f"run day dropped: {dropped.day} (~{dropped.rows_estimate} runs, "
                    f"{dropped.kept} kept)"
                )
            for kind, rows in expired.rows.items():
                print(f"{kind}: {rows} expired")
            sent = notifier.tick()
            print(
                f"notifications: {sent.sent} sent, {sent.retrying} to retry, "
                f"{sent.given_up} given up"
            )
        else:
            sender = threading.Thread(
                target=notifier.run, args=(stop, settings.notify_period_ms), name="notifier"
            )
            sender.start()
            service.run(stop, settings.maintenance_period_ms)
            sender.join(timeout=30)
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":  # `python -m kit.maintenance.cli ...` == `cronfleet maintenance ...`
    import sys

    from kit.cli import main

    raise SystemExit(main(["maintenance", *sys.argv[1:]]))
