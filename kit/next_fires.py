"""`cronfleet next-fires EXPR --tz TZ [--after ISO8601] [--count N] [--json]`: the next
fire times of a cron expression in a zone, what a user checks before deploying a
schedule. The times come from `kit.core.schedule`, the same code the scheduler uses,
so the preview shows the DST rule as it will be applied.

This is the edge: it may read the clock (the default `--after` is now).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from kit.core.errors import FieldError, UsageError, all_of
from kit.core.owed import dst_note
from kit.core.schedule import CronSchedule, next_fires, parse_cron, parse_instant, parse_timezone

MAX_COUNT = 1000


def fire_times(expr: str, tz: str, after: datetime, count: int) -> list[dict[str, str | None]]:
    """Each fire as local time with its offset and as UTC (ISO 8601), and how the DST
    rule shaped it if it did (the words of GET /v1/next-fires: kit.core.owed.dst_note)."""
    all_of(lambda: parse_cron(expr, "expr"), lambda: parse_timezone(tz, "tz"))
    zone = parse_timezone(tz, "tz")
    schedule = CronSchedule(parse_cron(expr, "expr"), tz)
    return [
        {
            "local": fire.astimezone(zone).isoformat(),
            "utc": fire.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "dst": dst_note(schedule, fire),
        }
        for fire in next_fires(schedule, after, count)
    ]


def _count(count: int) -> None:
    if not 1 <= count <= MAX_COUNT:
        raise FieldError("count", f"must be between 1 and {MAX_COUNT}")


def run(args: argparse.Namespace) -> int:
    try:
        # every bad argument is reported at once (one line)
        all_of(
            lambda: _count(args.count),
            lambda: args.after is None or parse_instant(args.after, "after"),
            lambda: parse_cron(args.expr, "expr"),
            lambda: parse_timezone(args.tz, "tz"),
        )
        after = datetime.now(UTC) if args.after is None else parse_instant(args.after, "after")
        fires = fire_times(args.expr, args.tz, after, args.count)
    except FieldError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(fires, indent=2))
    else:
        for fire in fires:
            note = f"  # {fire['dst']}" if fire["dst"] else ""
            print(f"{fire['local']}  {fire['utc']}{note}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "next-fires", help="preview the next fire times of a cron expression in a time zone"
    )
    parser.add_argument("expr", metavar="EXPR", help="cron expression, e.g. '30 2 * * *'")
    parser.add_argument("--tz", default="UTC", help="IANA time zone (default UTC)")
    parser.add_argument("--after", help="ISO 8601 instant with offset (default now)")
    parser.add_argument("--count", type=int, default=5, help="how many (default 5)")
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    parser.set_defaults(func=run)
