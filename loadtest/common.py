"""What every suite shares: its options, the token, custom statistics, CPU accounting,
the Markdown summary and its plots, and how a suite ends with its verdict as exit code.

A suite is a Locust file (`loadtest/<suite>.py`) run headless against a running kit;
`python -m loadtest SUITE --out DIR` runs it with Locust's CSV and HTML written to DIR
beside `summary.md`, `summary.json` and the plots.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent

DEFAULT_TENANT = "loadtest"


def add_common_arguments(parser: Any) -> None:
    """Options every suite takes (Locust's own parser; `--help` lists them)."""
    group = parser.add_argument_group("cronfleet")
    group.add_argument(
        "--token",
        default=os.environ.get("CRONFLEET_LOADTEST_TOKEN", ""),
        help="bearer token (default: $CRONFLEET_LOADTEST_TOKEN, else one is minted in the "
        "kit's database for --tenant, as `cronfleet tokens create` would)",
    )
    group.add_argument("--tenant", default=DEFAULT_TENANT, help="tenant of a minted token")
    group.add_argument(
        "--summary-dir",
        default="",
        help="where summary.md, summary.json and the plots go (default: beside --csv)",
    )


def summary_dir(options: Any) -> Path:
    if options.summary_dir:
        path = Path(options.summary_dir)
    elif getattr(options, "csv_prefix", None):
        path = Path(options.csv_prefix).parent
    else:
        path = Path("out/loadtest")
    path.mkdir(parents=True, exist_ok=True)
    return path


_minted: dict[str, str] = {}


def bearer_token(options: Any, scopes: Sequence[str] = ("read", "write")) -> str:
    """The token to use: given, or minted once per process straight in the database (the
    operator's way: no API route mints tokens)."""
    if options.token:
        return options.token
    if options.tenant not in _minted:
        from kit.settings import load_settings
        from kit.store.db import engine_for
        from kit.store.tokens import token_create

        engine = engine_for(load_settings().database_url, pool_size=1)
        try:
            _minted[options.tenant] = token_create(engine, options.tenant, scopes).token
        finally:
            engine.dispose()
    return _minted[options.tenant]


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of unsorted values (q in 0..100); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def fire(
    environment: Any,
    request_type: str,
    name: str,
    response_time_ms: float,
    exception: Exception | None = None,
) -> None:
    """A custom Locust statistic (it lands in the CSV, the HTML and the console table)."""
    environment.events.request.fire(
        request_type=request_type,
        name=name,
        response_time=response_time_ms,
        response_length=0,
        exception=exception,
        context={},
    )


def quit_soon(environment: Any) -> None:
    """Stop the whole test from inside a user (in its own greenlet, not the caller's)."""
    gevent.spawn_later(0.1, environment.runner.quit)


def set_up_or_quit(setup: Callable[[Any], None]) -> Callable[..., None]:
    """A test_start listener that, should its set-up fail (no token: the database not
    migrated, the kit not reachable), says why, exits 2 and stops the test at once.
    Without it the users found no state and looped on the error with nothing to stop
    them: a queue run against an unmigrated database spun a core for minutes."""

    def on_start(environment: Any, **_: Any) -> None:
        try:
            setup(environment)
        except Exception as exc:
            print(f"could not set up: {type(exc).__name__}: {exc}", file=sys.stderr)
            environment.process_exit_code = 2
            quit_soon(environment)

    return on_start


# ---------------------------------------------------------------------------
# CPU accounting from /proc: who spent the machine's cores during the test


_TICK = os.sysconf("SC_CLK_TCK")


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def listening_pids(port: int) -> set[int]:
    """Processes holding a socket that listens on this TCP port (the service's own)."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    pids: set[int] = set()
    if not wanted:
        return pids
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") in wanted:
                    pids.add(int(entry))
                    break
        except OSError:
            continue
    return pids


def _processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, cmdline, CPU seconds of it and its children already reaped:
    PostgreSQL's closed backends, uvicorn's ended workers still count)."""
    out: dict[int, tuple[int, str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("latin-1")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("latin-1")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        out[int(entry)] = (int(fields[1]), cmd, sum(int(x) for x in fields[11:15]) / _TICK)
    return out


def _subtree(procs: dict[int, tuple[int, str, float]], roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    stack = [r for r in roots if r in procs]
    while stack:
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, []))
    return seen


def service_roots(api_url: str) -> dict[str, set[int]]:
    """The processes of the kit under test, found by the ports they listen on: the API
    (from the target URL), PostgreSQL and Kafka (from the kit's settings); `kit` is the
    other services when the API runs under `cronfleet run-all` (its siblings)."""
    from urllib.parse import urlsplit

    from sqlalchemy.engine import make_url

    from kit.settings import load_settings

    settings = load_settings()
    api_port = urlsplit(api_url).port or 80
    db_port = make_url(settings.database_url).port or 5432
    kafka_port = int(settings.kafka_bootstrap.split(",")[0].rsplit(":", 1)[1])
    roots = {
        "api": listening_pids(api_port),
        "postgres": listening_pids(db_port),
        "kafka": listening_pids(kafka_port),
    }
    procs = _processes()
    api_top = {p for p in roots["api"] if procs.get(p, (0,))[0] not in roots["api"]}
    parents = {procs[p][0] for p in api_top if p in procs}
    run_all = {p for p in parents if p in procs and "run-all" in procs[p][1]}
    roots["kit"] = {
        pid for pid, (ppid, _, _) in procs.items() if ppid in run_all and pid not in api_top
    }
    return roots


def _proc_cpu(roots: dict[str, set[int]]) -> dict[str, float]:
    """CPU seconds by group (each root and its descendants) and of this Locust process."""
    procs = _processes()
    out = {}
    for group, pids in roots.items():
        out[group] = sum(procs[p][2] for p in _subtree(procs, pids))
    times = os.times()
    out["locust"] = times.user + times.system + times.children_user + times.children_system
    return out


@dataclass
class CpuMeter:
    """CPU seconds spent by each group between start() and stop()."""

    api_url: str = "http://127.0.0.1:8080"
    started: dict[str, float] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    _t0: float = 0.0
    _roots: dict[str, set[int]] = field(default_factory=dict)

    def start(self) -> None:
        self._roots = service_roots(self.api_url)
        self.started = _proc_cpu(self._roots)
        self._t0 = time.monotonic()

    def stop(self) -> dict[str, float]:
        end = _proc_cpu(self._roots)
        self.wall_s = time.monotonic() - self._t0
        self.spent = {k: round(end.get(k, 0.0) - self.started.get(k, 0.0), 2) for k in end}
        return self.spent

    def shares(self) -> dict[str, float]:
        """Share of the machine's cores each group used (1.0 = every core all the time)."""
        cores = os.cpu_count() or 1
        if self.wall_s <= 0:
            return {}
        return {k: round(v / (self.wall_s * cores), 3) for k, v in self.spent.items()}


# ---------------------------------------------------------------------------
# Locust's own per-route statistics, as rows for the summary


def route_rows(environment: Any) -> list[dict[str, Any]]:
    rows = []
    for (name, method), entry in sorted(environment.stats.entries.items()):
        if entry.num_requests == 0:
            continue
        rows.append(
            {
                "type": method,
                "name": name,
                "requests": entry.num_requests,
                "failures": entry.num_failures,
                "rps": round(entry.total_rps, 1),
                "p50_ms": entry.get_response_time_percentile(0.50),
                "p99_ms": entry.get_response_time_percentile(0.99),
                "max_ms": round(entry.max_response_time or 0, 1),
            }
        )
    return rows


def calls_percentiles(environment: Any, leave_out: Sequence[str] = ()) -> tuple[float, float]:
    """p50 and p99 over every call of the run but those of routes whose name contains
    one of `leave_out` (a suite's setup, its monitor's polls)."""
    from locust.stats import StatsEntry

    calls = StatsEntry(environment.stats, "calls", "")
    for (name, _method), entry in environment.stats.entries.items():
        if not any(mark in name for mark in leave_out):
            calls.extend(entry)
    return calls.get_response_time_percentile(0.5), calls.get_response_time_percentile(0.99)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "(none)\n"
    columns = list(columns or rows[0].keys())
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_summary(
    directory: Path,
    title: str,
    verdict: Iterable[str],
    sections: Sequence[tuple[str, str]],
    data: dict[str, Any],
    plots: Sequence[str] = (),
) -> Path:
    """summary.md (verdict, sections, plots) and summary.json (the same figures)."""
    lines = [f"# {title}", ""]
    lines += [f"- {line}" for line in verdict]
    lines.append("")
    for heading, body in sections:
        lines += [f"## {heading}", "", body.rstrip(), ""]
    for plot in plots:
        lines += [f"![{Path(plot).stem}]({Path(plot).name})", ""]
    path = directory / "summary.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    (directory / "summary.json").write_text(
        json.dumps(data, indent=2, default=str, allow_nan=True), encoding="utf-8"
    )
    return path


def cpu_section(meter: CpuMeter, requests: int) -> tuple[str, dict[str, Any]]:
    """The CPU table: seconds, share of the 2 cores, and ms per request for each group."""
    rows = []
    shares = meter.shares()
    for group, seconds in sorted(meter.spent.items()):
        rows.append(
            {
                "group": group,
                "cpu_s": seconds,
                "share_of_machine": shares.get(group, 0.0),
                "cpu_ms_per_request": round(1000 * seconds / requests, 3) if requests else "-",
            }
        )
    text = (
        f"Over {meter.wall_s:.1f} s wall on {os.cpu_count()} cores, {requests:,} requests "
        "(share: 1.0 = every core all the time; `locust` is the load generator; processes "
        "found by the ports they listen on, `kit` = the other services under run-all):\n\n"
        + markdown_table(rows)
    )
    return text, {"wall_s": meter.wall_s, "cpu_s": meter.spent, "shares": shares}
