"""Scan idle gap: the longest stretch a scan's transaction sits idle on the server (Python
between two of its statements, or between the last one and COMMIT) while a scheduler
node's scan takes N cron jobs due at one second, with varied expressions and time zones,
on a fresh node (no schedule parsed yet). The server ends a scheduler session idle in a
transaction for `idle_in_transaction_session_timeout` (kit.scheduler.node.scheduler_engine):
a gap near it kills the scan.

    python benchmarks/scan_gap.py --jobs 20000

A scratch database on the stack's server, dropped at the end. Figures, not asserts.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import uuid
from datetime import UTC, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from kit.core.policies import MisfirePolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import CronSchedule
from kit.scheduler import scan as scan_mod
from kit.scheduler.node import NodeConfig, SchedulerNode, scheduler_engine
from kit.settings import load_settings
from kit.store.jobs import JobSpec, jobs_create_batch
from kit.store.scratch import migrated_database

ZONES = (
    "UTC", "Europe/Paris", "Europe/London", "America/New_York", "America/Los_Angeles",
    "America/Sao_Paulo", "Asia/Tokyo", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Sydney",
    "Australia/Lord_Howe", "Pacific/Auckland", "Pacific/Chatham", "Africa/Cairo",
    "Asia/Tehran", "America/St_Johns", "Europe/Moscow", "Asia/Shanghai", "America/Chicago",
    "Atlantic/Azores",
)  # fmt: skip


def expressions(local) -> list[str]:  # type: ignore[no-untyped-def]
    """Cron shapes that all match the local wall time `local` (minute resolution)."""
    m, h, d, mo = local.minute, local.hour, local.day, local.month
    dow = (local.weekday() + 1) % 7  # cron: Sunday is 0
    return [
        "* * * * *",
        f"{m} * * * *",
        f"{m % 5}-59/5 * * * *",
        f"{m} {h} * * *",
        f"{m} {h % 12}-23/12 * * *",
        f"{m},{(m + 30) % 60} {h},{(h + 12) % 24} * * *",
        f"{m} {h} * * {dow}",
        f"{m} {h} {d} * *",
        f"{m} {h} {d} {mo} *",
        f"{m} {h} * * 1-5" if dow in (1, 2, 3, 4, 5) else f"{m} {h} * * 0,6",
    ]


def specs_due_at(n: int, at) -> list[JobSpec]:  # type: ignore[no-untyped-def]
    shapes = [CronSchedule(e, z) for z in ZONES for e in expressions(at.astimezone(ZoneInfo(z)))]
    retry, misfire = RetryPolicy().to_dict(), MisfirePolicy().to_dict()
    return [
        JobSpec(f"j{i}", shapes[i % len(shapes)], {"type": "noop"}, retry, misfire)
        for i in range(n)
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=0, help="scan batch (0: the node's default)")
    args = ap.parse_args()
    settings = load_settings()
    admin_url = make_url(settings.database_url)
    name = f"cf_bench_gap_{uuid.uuid4().hex[:8]}"
    with migrated_database(admin_url, name) as db:  # dropped on the way out
        url = db.render_as_string(hide_password=False)
        config = NodeConfig() if not args.batch else NodeConfig(scan_batch=args.batch)
        engine = scheduler_engine(url, config)
        with engine.connect() as conn:
            db_now = conn.execute(text("SELECT now()")).scalar_one()
            timeout = conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar()
        due = (db_now + timedelta(minutes=2)).replace(second=0, microsecond=0)
        jobs_create_batch(
            engine, "bench", specs_due_at(args.jobs, due), now=due - timedelta(seconds=5)
        )
        print(f"kit from {scan_mod.__file__}")
        print(f"{args.jobs} cron jobs due at {due.astimezone(UTC):%H:%M:%S}; "
              f"idle_in_transaction_session_timeout {timeout}")  # fmt: skip

        marks: list[tuple[float, str]] = []  # (perf_counter, what) at each statement edge

        @event.listens_for(engine, "before_cursor_execute")
        def _before(conn, cursor, statement, *a):  # type: ignore[no-untyped-def]
            marks.append((time.perf_counter(), "send " + " ".join(statement.split())[:40]))

        @event.listens_for(engine, "after_cursor_execute")
        def _after(conn, cursor, statement, *a):  # type: ignore[no-untyped-def]
            marks.append((time.perf_counter(), "done " + " ".join(statement.split())[:40]))

        @event.listens_for(engine, "commit")
        def _commit(conn):  # type: ignore[no-untyped-def]
            marks.append((time.perf_counter(), "send COMMIT"))

        due_read = scan_mod.sql.triggers_due  # a raw cursor: no engine events

        def timed_due(*a, **kw):  # type: ignore[no-untyped-def]
            marks.append((time.perf_counter(), "send triggers_due"))
            rows = due_read(*a, **kw)
            marks.append((time.perf_counter(), "done triggers_due"))
            return rows

        scan_mod.sql.triggers_due = timed_due  # type: ignore[assignment]
        node = SchedulerNode(engine, _NoPublish(), "gap-1", config)
        node.lease_pass()
        marks.clear()
        t0 = time.perf_counter()
        try:
            result = node.scan_once(now=due - timedelta(seconds=3))
            outcome = f"fired {len(result.held)} of {result.triggers} read"
        except Exception as exc:  # the figure is what failed
            outcome = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        total = time.perf_counter() - t0
        gaps = [
            (b[0] - a[0], a[1], b[1])
            for a, b in itertools.pairwise(marks)
            if a[1].startswith("done") and b[1].startswith("send")
        ]
        gaps.sort(reverse=True)
        print(f"scan {total:.3f} s: {outcome}")
        for g, a, b in gaps[:3]:
            print(f"  idle {g:.3f} s between [{a}] and [{b}]")
        engine.dispose()
    return 0


class _NoPublish:
    def publish(self, messages, timeout_s=10.0):  # type: ignore[no-untyped-def]
        return None

    def publish_encoded(self, messages, timeout_s=10.0):  # type: ignore[no-untyped-def]
        return {}


if __name__ == "__main__":
    sys.exit(main())
