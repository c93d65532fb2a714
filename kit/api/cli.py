"""`cronfleet api [--host --port --workers N]`: serve the jobs API and the console with
uvicorn (HTTPS with --ssl-certfile/--ssl-keyfile; the console's cookie is then Secure).

Concurrency: N processes (`--workers`, default `CRONFLEET_API_WORKERS`, 1) share the
port; each runs one event loop (uvloop when installed). The hot handlers (the queue's,
the jobs CRUD, runs) are async and wait on the database without a thread: the queue's on
psycopg's async connections (kit.store.pg_async), the others on SQLAlchemy's async engine
(kit.store.db.on_loop); the rest are sync handlers in a thread pool as large as the
database pool. Processes, not threads, are what use more than one core: the handlers are
Python, and one process holds one GIL."""

from __future__ import annotations

import argparse
import os


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("api", help="serve the jobs HTTP API")
    parser.add_argument("--host", help="bind address (default: settings.api_host)")
    parser.add_argument("--port", type=int, help="port (default: settings.api_port)")
    parser.add_argument(
        "--topic-prefix", help="run topic prefix the fleet view reads (default cronfleet.runs)"
    )
    parser.add_argument(
        "--group-id", help="workers' consumer group the fleet view reads (default: settings)"
    )
    parser.add_argument(
        "--workers", type=int, help="server processes (default: settings.api_workers, 1)"
    )
    parser.add_argument(
        "--access-log", action="store_true", help="log every request (off: it costs CPU)"
    )
    parser.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--ssl-keyfile", help="the certificate's private key (PEM)")
    parser.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from kit.api.safe_log import uvicorn_log_config
    from kit.core.errors import UsageError
    from kit.settings import load_settings
    from kit.store.shards import require_usable
    from kit.tasks.policy import policy_source
    from kit.tasks.tenant_policy import tenant_policy_source

    settings = load_settings()
    require_usable(settings.shards())  # every shard answers, at one revision
    port = args.port if args.port is not None else settings.api_port
    if not 1 <= port <= 65535:
        raise UsageError(f"port: {port} is not between 1 and 65535")
    host = args.host or settings.api_host
    if bool(args.ssl_certfile) != bool(args.ssl_keyfile):
        raise UsageError("ssl-certfile: give both --ssl-certfile and --ssl-keyfile, or neither")
    workers = args.workers if args.workers is not None else settings.api_workers
    if not 1 <= workers <= 64:
        raise UsageError(f"workers: {workers} is not between 1 and 64")
    # the operator's files, checked once here (one line naming the entry, exit 2) rather
    # than by each server process
    policy_source(settings.task_policy_file, settings.http_allow_hosts)
    tenant_policy_source(settings.tenant_policy_file)
    if args.topic_prefix:
        os.environ[TOPIC_PREFIX_ENV] = args.topic_prefix
    if args.group_id:
        os.environ[GROUP_ID_ENV] = args.group_id
    # one process: the app built here; several: each worker process builds its own
    app: object = app_from_environment() if workers == 1 else "kit.api.cli:app_from_environment"
    uvicorn.run(
        app,
        factory=workers > 1,
        workers=workers if workers > 1 else None,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        log_config=uvicorn_log_config(settings.log_level.upper()),
        access_log=args.access_log,
        proxy_headers=False,
        loop=_best("uvloop", "auto"),
        http=_best("httptools", "auto"),
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
    )
    return 0


# What the fleet view reads, handed to worker processes through their environment.
TOPIC_PREFIX_ENV = "_CRONFLEET_API_TOPIC_PREFIX"
GROUP_ID_ENV = "_CRONFLEET_API_GROUP_ID"


def app_from_environment() -> object:
    """The application one server process serves (uvicorn's factory for --workers)."""
    from kit.api.app import create_app
    from kit.settings import load_settings

    app = create_app(load_settings())
    if prefix := os.environ.get(TOPIC_PREFIX_ENV):
        app.state.topic_prefix = prefix
    if group := os.environ.get(GROUP_ID_ENV):
        app.state.group_id = group
    return app


def _best(module: str, fallback: str) -> str:
    """uvloop and httptools are faster than asyncio's loop and h11; use them if present."""
    try:
        __import__(module)
    except ImportError:
        return fallback
    return module
