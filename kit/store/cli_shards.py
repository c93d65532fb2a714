"""`cronfleet shards check`: every shard the deployment names, whether it answers and at
which schema revision; exit 1 with the one line a service's start would refuse on."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kit.settings import load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("shards", help="the PostgreSQL shards: check")
    sub = parser.add_subparsers(dest="shards_command", metavar="ACTION", required=True)
    check = sub.add_parser(
        "check",
        help="each shard: does it answer, its schema revision (exit 1 when a service "
        "would refuse to start on them)",
    )
    check.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from kit.store.shards import problem, states

    found = states(load_settings().shards())
    for shard in found:
        said = f"at {shard.revision or 'none'} (head {shard.head})" if shard.answers else "DOWN"
        print(f"{shard.name:<12} {shard.shown_url:<64} {said}")
    if (line := problem(found)) is not None:
        print(f"cronfleet shards check: {line}", file=sys.stderr)
        return 1
    return 0
