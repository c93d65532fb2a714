"""`cronfleet tokens create | list | revoke`: API tokens, bound to a tenant and scopes.

`create` prints only the token on stdout (so `TOKEN=$(cronfleet tokens create ...)` works);
it cannot be shown again.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from kit.settings import load_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tokens", help="API tokens")
    sub = parser.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)
    create = sub.add_parser("create", help="create a token and print it (shown once)")
    create.add_argument("--tenant", required=True)
    create.add_argument(
        "--scope",
        action="append",
        dest="scopes",
        help=(
            "read, write, admin or command (jobs with command tasks, where the operator's "
            "task policy allows them); repeat for several (default: read and write)"
        ),
    )
    create.set_defaults(func=_create)
    listing = sub.add_parser("list", help="list tokens (ids and scopes, never secrets)")
    listing.add_argument("--tenant")
    listing.set_defaults(func=_list)
    revoke = sub.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("token_id")
    revoke.set_defaults(func=_revoke)


def _engine() -> Engine:
    from kit.store.db import engine_for

    return engine_for(load_settings().database_url, pool_size=1)


def _create(args: argparse.Namespace) -> int:
    from kit.core.errors import FieldError, UsageError
    from kit.store.tenants import tenant_check
    from kit.store.tokens import DEFAULT_SCOPES, scopes_check, token_create

    try:
        tenant_check(args.tenant)
        scopes = scopes_check(args.scopes or DEFAULT_SCOPES)
    except FieldError as exc:
        raise UsageError(f"{exc.field}: {exc.reason}") from exc
    issued = token_create(_engine(), args.tenant, scopes)
    print(issued.token)
    return 0


def _list(args: argparse.Namespace) -> int:
    from kit.store.tokens import tokens_list

    for info in tokens_list(_engine(), args.tenant):
        state = f"revoked {info.revoked_at.isoformat()}" if info.revoked_at else "active"
        print(f"{info.token_id}\t{info.tenant}\t{','.join(info.scopes)}\t{state}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from kit.store.tokens import token_revoke

    if not token_revoke(_engine(), args.token_id):
        print(f"no active token {args.token_id}")
        return 1
    return 0
