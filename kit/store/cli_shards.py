"""`cronfleet shards show | check`: the shard map the deployment runs on and every shard
the settings name, whether it answers and at which schema revision; `check` exits 1
with the one line a service's start would refuse on (docs/shards.md)."""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path
from typing import Any

from kit.settings import load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("shards", help="the PostgreSQL shards: show, check")
    sub = parser.add_subparsers(dest="shards_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="the shard map and each shard's state")
    show.set_defaults(func=_show)
    check = sub.add_parser(
        "check",
        help="each shard: does it answer, its schema revision, the map against the settings "
        "(exit 1 when a service would refuse to start on them)",
    )
    check.add_argument(
        "--map",
        type=Path,
        default=None,
        metavar="FILE",
        help="check this shard map (TOML) against the settings instead of the stored one; "
        "nothing is written",
    )
    check.set_defaults(func=_check)


def _print_states(shards: dict[str, str]) -> list[Any]:
    from kit.store.shards import states

    found = states(shards)
    for shard in found:
        said = f"at {shard.revision or 'none'} (head {shard.head})" if shard.answers else "DOWN"
        print(f"{shard.name:<12} {shard.shown_url:<64} {said}")
    return found


def _show(args: argparse.Namespace) -> int:
    from kit.core.shard_map import render_shard_map
    from kit.store.shard_catalog import deployed_map

    shards = load_settings().shards()
    found = _print_states(shards)
    if not found[0].answers:
        return 1
    shard_map, stored = deployed_map(shards)
    print()
    print(render_shard_map(shard_map))
    if not stored:
        print("(no map stored: every partition on the home shard)")
    return 0


def _check(args: argparse.Namespace) -> int:
    from kit.core.errors import FieldError, UsageError
    from kit.core.shard_map import parse_shard_map
    from kit.store.shard_catalog import map_problem
    from kit.store.shards import catalog_problem, problem

    shards = load_settings().shards()
    given = None
    if args.map is not None:
        try:
            given = parse_shard_map(tomllib.loads(args.map.read_text()))
        except OSError as exc:
            raise UsageError(f"map: cannot read {args.map}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"map: {args.map} is not TOML: {exc}") from None
        except FieldError as exc:
            raise UsageError(f"map: {args.map}: {exc}") from None
    line = problem(_print_states(shards))
    if line is None:
        line = catalog_problem(shards) if given is None else map_problem(given, shards)
    if line is not None:
        print(f"cronfleet shards check: {line}", file=sys.stderr)
        return 1
    return 0
