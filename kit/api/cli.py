"""`cronfleet api [--host --port]`: serve the jobs API with uvicorn."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("api", help="serve the jobs HTTP API")
    parser.add_argument("--host", help="bind address (default: settings.api_host)")
    parser.add_argument("--port", type=int, help="port (default: settings.api_port)")
    parser.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from kit.api.app import create_app
    from kit.cli import UsageError
    from kit.settings import load_settings

    settings = load_settings()
    port = args.port if args.port is not None else settings.api_port
    if not 1 <= port <= 65535:
        raise UsageError(f"port: {port} is not between 1 and 65535")
    host = args.host or settings.api_host
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        proxy_headers=False,
    )
    return 0
