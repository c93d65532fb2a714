"""`cronfleet api [--host --port]`: serve the jobs API and the console with uvicorn
(HTTPS with --ssl-certfile/--ssl-keyfile; the console's cookie is then Secure)."""

from __future__ import annotations

import argparse


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
    parser.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--ssl-keyfile", help="the certificate's private key (PEM)")
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
    if bool(args.ssl_certfile) != bool(args.ssl_keyfile):
        raise UsageError("ssl-certfile: give both --ssl-certfile and --ssl-keyfile, or neither")
    app = create_app(settings)
    if args.topic_prefix:
        app.state.topic_prefix = args.topic_prefix
    if args.group_id:
        app.state.group_id = args.group_id
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        proxy_headers=False,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
    )
    return 0
