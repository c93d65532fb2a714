"""`cronfleet db upgrade | current`: migrate the database the settings point at."""

from __future__ import annotations

import argparse

from kit.settings import load_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("db", help="database migrations")
    sub = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    up = sub.add_parser("upgrade", help="migrate the database to the newest schema")
    up.add_argument("--revision", default="head", help="target revision (default: head)")
    up.set_defaults(func=_upgrade)
    cur = sub.add_parser("current", help="print the database's revision and the newest one")
    cur.set_defaults(func=_current)


def _upgrade(args: argparse.Namespace) -> int:
    from kit.store import migrate

    url = load_settings().database_url
    migrate.upgrade(url, args.revision)
    print(f"database at revision {migrate.current_revision(url)}")
    return 0


def _current(args: argparse.Namespace) -> int:
    from kit.store import migrate

    url = load_settings().database_url
    current = migrate.current_revision(url)
    head = migrate.head_revision(url)
    state = "up to date" if current == head else f"behind (head is {head})"
    print(f"{current or 'none'} ({state})")
    return 0 if current == head else 1
