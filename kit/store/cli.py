"""`cronfleet db upgrade | current | wait | app-role`: migrate the database the settings
point at, gate a service on its schema, make the role the services connect as."""

from __future__ import annotations

import argparse
import os
import sys
import time

from kit.settings import load_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("db", help="database migrations")
    sub = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    up = sub.add_parser("upgrade", help="migrate the database to the newest schema")
    up.add_argument("--revision", default="head", help="target revision (default: head)")
    up.set_defaults(func=_upgrade)
    cur = sub.add_parser("current", help="print the database's revision and the newest one")
    cur.set_defaults(func=_current)
    wait = sub.add_parser(
        "wait",
        help="wait until the schema is this code's head or newer (a service's start gate)",
    )
    wait.add_argument(
        "--timeout-s", type=float, default=900.0, help="give up (exit 1) after this long"
    )
    wait.set_defaults(func=_wait)
    app = sub.add_parser(
        "app-role",
        help="create or update the services' role (password from CRONFLEET_APP_ROLE_PASSWORD)",
    )
    app.add_argument("name", help="the role's name, e.g. cronfleet_app")
    app.set_defaults(func=_app_role)


def _upgrade(args: argparse.Namespace) -> int:
    """Every shard, the home one first; one that fails stops the rest (each shard's
    migration is its own transaction: a shard is at the old revision or the new one)."""
    from kit.store import migrate
    from kit.store.shards import hidden

    shards = load_settings().shards()
    for name, url in shards.items():
        migrate.upgrade(url, args.revision)
        revision = migrate.current_revision(url)
        if len(shards) == 1:
            print(f"database at revision {revision}")
        else:
            print(f"shard {name} ({hidden(url)}) at revision {revision}")
    return 0


def _current(args: argparse.Namespace) -> int:
    from kit.store import migrate

    shards = load_settings().shards()
    behind = False
    for name, url in shards.items():
        current = migrate.current_revision(url)
        head = migrate.head_revision(url)
        behind |= current != head
        state = "up to date" if current == head else f"behind (head is {head})"
        prefix = "" if len(shards) == 1 else f"shard {name}: "
        print(f"{prefix}{current or 'none'} ({state})")
    return 1 if behind else 0


def _wait(args: argparse.Namespace) -> int:
    """Exit 0 once a service of this code may start on the database's schema; 1 when the
    schema is still behind after --timeout-s (or the database cannot be reached)."""
    from kit.core.errors import UsageError

    if args.timeout_s < 0:
        raise UsageError("timeout-s: must not be negative")
    shards = load_settings().shards()
    deadline = time.monotonic() + args.timeout_s
    said = ""
    while True:
        ready, line = _every_shard_ready(shards)
        if ready:
            print(line)
            return 0
        if line != said:
            print(line + "; waiting for an api machine's `cronfleet db upgrade`", file=sys.stderr)
            said = line
        if time.monotonic() >= deadline:
            print(f"gave up after {args.timeout_s:g} s: {line}", file=sys.stderr)
            return 1
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))


def _every_shard_ready(shards: dict[str, str]) -> tuple[bool, str]:
    """(may a service start on every shard's schema, one line of why or why not)."""
    from kit.store import migrate

    lines = []
    for name, url in shards.items():
        where = "database" if len(shards) == 1 else f"shard {name}"
        try:
            state, current, head = migrate.schema_state(url)
        except Exception as exc:  # unreachable or refused: the same wait, said once
            return False, f"{where} not answering: {type(exc).__name__}: {exc}"
        line = f"schema {state}: {where} at {current or 'none'}, this code's head {head}"
        if state not in (migrate.SchemaState.AT_HEAD, migrate.SchemaState.NEWER):
            return False, line
        lines.append(line)
    return True, "; ".join(lines)


def _app_role(args: argparse.Namespace) -> int:
    from kit.core.errors import UsageError
    from kit.store import migrate

    password = os.environ.get("CRONFLEET_APP_ROLE_PASSWORD", "")
    if not password:
        raise UsageError("CRONFLEET_APP_ROLE_PASSWORD: the role's password, not set")
    for url in load_settings().shards().values():
        migrate.ensure_app_role(url, args.name, password)
    print(f"role {args.name}: may log in, read and write the schema's tables; no DDL")
    return 0
