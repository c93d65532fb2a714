"""What the storm and steady suites share: the ledgers they read (the workers' execution
journal, the ledger endpoint's file, the run topic's messages), the lags they turn into
Locust statistics, and their report.

Every run the suite expects is named by its deterministic id (`kit.core.ids.run_id` of
job and scheduled time), so a start is matched to its scheduled time without asking the
database: dropped = expected and never started; run twice = started more than once.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, constant, task

from loadtest import common, plots

REPO = Path(__file__).resolve().parent.parent


def add_run_arguments(parser: Any, target_p99_s: float) -> Any:
    g = parser.add_argument_group("runs (storm, steady)")
    g.add_argument(
        "--journal-dir",
        default=os.environ.get("CRONFLEET_EXECUTION_JOURNAL_DIR", ""),
        help="the workers' CRONFLEET_EXECUTION_JOURNAL_DIR (default: this environment's)",
    )
    g.add_argument("--task", choices=("noop", "http"), default="noop", help="task body")
    g.add_argument(
        "--target-p99",
        type=float,
        default=target_p99_s,
        help=f"seconds: fail when p99 scheduled->started passes it (default {target_p99_s:g})",
    )
    g.add_argument(
        "--lead-s",
        type=float,
        default=0,
        help="seconds from now to the first due second (0: enough to create the jobs first)",
    )
    g.add_argument("--drain-s", type=float, default=60, help="longest wait for the runs after")
    g.add_argument("--priority", default="normal", help="the jobs' priority tier")
    g.add_argument("--topic-prefix", default="cronfleet.runs", help="the kit's run topics")
    g.add_argument("--batch-size", type=int, default=5000, help="jobs per POST /v1/jobs:batch")
    g.add_argument(
        "--ledger-bin",
        default="",
        help="the ledger endpoint (default: built by scripts/build_ledger.sh)",
    )
    return g


# ---------------------------------------------------------------------------
# The execution journal: one line per task start, per worker


class JournalReader:
    """Reads `<dir>/*.journal` as they grow (whole lines only)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}

    def skip_existing(self) -> None:
        """Start after what is already there (earlier tests' lines)."""
        for path in self.directory.glob("*.journal"):
            self.offsets[path] = path.stat().st_size

    def read_new(self) -> list[tuple[str, int, int, str]]:
        out = []
        for path in sorted(self.directory.glob("*.journal")):
            with path.open("rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            if not data:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + len(data)
            data = self.partial.pop(path, b"") + data
            lines = data.split(b"\n")
            if lines[-1]:
                self.partial[path] = lines[-1]
            for line in lines[:-1]:
                run_id, attempt, started_ms, worker = line.decode().split("\t")
                out.append((run_id, int(attempt), int(started_ms), worker))
        return out


# ---------------------------------------------------------------------------
# The ledger endpoint (Go), for http tasks


class LedgerEndpoint:
    """The Go ledger server on a free loopback port; records land in `path`."""

    def __init__(self, directory: Path, binary: str = "") -> None:
        self.path = directory / "ledger.tsv"
        self.port_file = directory / "ledger.port"
        self.binary = binary or str(REPO / "loadtest" / "ledger" / "bin" / "ledger")
        self.proc: subprocess.Popen[bytes] | None = None
        self.offset = 0
        self.partial = b""

    def start(self) -> str:
        if not Path(self.binary).exists():
            subprocess.run(["bash", str(REPO / "scripts" / "build_ledger.sh")], check=True)
        self.port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                self.binary,
                "-addr",
                "127.0.0.1:0",
                "-out",
                str(self.path),
                "-port-file",
                str(self.port_file),
            ]
        )
        deadline = time.monotonic() + 10
        while not self.port_file.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the ledger endpoint did not start")
            time.sleep(0.05)
        return f"http://127.0.0.1:{int(self.port_file.read_text())}/hit"

    def read_new(self) -> list[tuple[str, int]]:
        """(Idempotency-Key, arrival ms) of requests recorded since the last call."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines[-1]
        out = []
        for line in lines[:-1]:
            key, arrival_us, _, _ = line.decode().split("\t")
            out.append((key, int(arrival_us) // 1000))
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)


# ---------------------------------------------------------------------------
# The run topic: when was each run published


def topic_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> high watermark now (0 for a topic not created yet)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cf-loadtest-probe"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        }
    finally:
        consumer.close()


def publish_times(
    bootstrap: str, topic: str, start: Mapping[int, int], wanted: set[str]
) -> dict[str, list[int]]:
    """run id -> message timestamps (ms, the producer's clock) of messages published on
    the topic after `start` for the wanted runs."""
    from confluent_kafka import Consumer, TopicPartition

    from kit.transport.message import MessageError, RunMessage

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cf-loadtest-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: dict[str, list[int]] = {}
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None:
            return out
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        }
        todo = {p for p in ends if ends[p] > start.get(p, 0)}
        consumer.assign([TopicPartition(topic, p, start.get(p, 0)) for p in todo])
        deadline = time.monotonic() + 120
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error() is not None:
                    continue
                if msg.offset() >= ends[msg.partition()] - 1:
                    todo.discard(msg.partition())
                try:
                    run = RunMessage.from_bytes(msg.value())
                except MessageError:
                    continue
                if run.run_id in wanted:
                    out.setdefault(run.run_id, []).append(msg.timestamp()[1])
    finally:
        consumer.close()
    return out


# ---------------------------------------------------------------------------
# Setting a run test up


class SetupError(Exception):
    """The storm could not be set up as asked: exit code 2, not a verdict on the kit."""


def jobs_body(
    names: list[str], schedule: dict[str, Any], task_spec: dict[str, Any], priority: str
) -> Any:
    return {
        "jobs": [
            {
                "name": name,
                "schedule": schedule,
                "task": task_spec,
                "retry": {"max_attempts": 1},
                "priority": priority,
                "timeout_s": 60,
            }
            for name in names
        ]
    }


def create_jobs(
    user: Any,
    token: str,
    names: list[str],
    schedule: dict[str, Any],
    task_spec: dict[str, Any],
    options: Any,
) -> list[str]:
    """POST /v1/jobs:batch in batches; the new job ids, in order."""
    job_ids: list[str] = []
    for start in range(0, len(names), options.batch_size):
        body = jobs_body(
            names[start : start + options.batch_size], schedule, task_spec, options.priority
        )
        with user.client.post(
            "/v1/jobs:batch",
            json=body,
            headers=common.headers(token),
            name="POST /v1/jobs:batch",
            catch_response=True,
        ) as response:
            if response.status_code != 201:
                response.failure(f"{response.status_code}: {response.text[:300]}")
                raise SetupError(f"creating jobs: {response.status_code} {response.text[:300]}")
            job_ids.extend(response.json()["job_ids"])
    return job_ids


def wait_for_runs(
    ledger: RunLedger,
    journal: JournalReader,
    endpoint: LedgerEndpoint | None,
    deadline_ms: int,
    last_due_ms: int,
) -> None:
    """Read the ledgers until every expected run started (and, for http, arrived) or the
    deadline; then a little longer, for late duplicates."""
    complete_at = None
    while True:
        ledger.add_starts(journal.read_new())
        if endpoint is not None:
            ledger.add_arrivals(endpoint.read_new())
        now_ms = time.time() * 1000
        if complete_at is None and ledger.complete(endpoint is not None):
            complete_at = now_ms
        if complete_at is not None and now_ms > complete_at + 2000:
            return
        if now_ms > deadline_ms:
            return
        journals = any(journal.directory.glob("*.journal"))
        if now_ms > last_due_ms + 15_000 and not ledger.starts and not journals:
            raise SetupError(
                f"no execution journal in {journal.directory}: start the workers with "
                f"CRONFLEET_EXECUTION_JOURNAL_DIR={journal.directory}"
            )
        gevent.sleep(0.5)


class RunTestUser(FastHttpUser):
    """The one user of a run test (storm, steady): drives it once, then stops Locust.
    A SetupError is the exit code 2; the report sets 0 or 1."""

    abstract = True
    fixed_count = 1
    wait_time = constant(1)
    network_timeout = 300.0
    connection_timeout = 60.0
    state: dict[str, Any]  # the suite's module state

    def drive(self) -> None:
        raise NotImplementedError

    @task
    def run_once(self) -> None:
        if self.state.get("started"):
            return
        self.state["started"] = True
        try:
            self.drive()
        except SetupError as exc:
            self.state["setup_error"] = str(exc)
            print(f"{type(self).__name__}: {exc}", file=sys.stderr)
        finally:
            common.quit_soon(self.environment)


def exit_code_on_quit(state: dict[str, Any]) -> Callable[..., None]:
    """The quitting listener of a run test: the ledger endpoint stopped, and exit code 2
    when the test never reached its report."""

    def on_quit(environment: Any, **_: Any) -> None:
        if state.get("endpoint") is not None:
            state["endpoint"].stop()
        if "setup_error" in state or "passed" not in state:
            environment.process_exit_code = 2

    return on_quit


def journal_dir(options: Any) -> Path:
    if not options.journal_dir:
        raise SetupError(
            "--journal-dir: give the workers' CRONFLEET_EXECUTION_JOURNAL_DIR (the ledger of "
            "task starts)"
        )
    path = Path(options.journal_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def task_body(options: Any, endpoint: LedgerEndpoint | None) -> dict[str, Any]:
    if endpoint is None:
        return {"type": "noop"}
    return {"type": "http", "url": endpoint.start(), "method": "POST"}


# ---------------------------------------------------------------------------
# Verdict and report


@dataclass
class RunLedger:
    """Expected runs (id -> scheduled ms) and what the ledgers saw of them."""

    expected: dict[str, int]
    starts: dict[str, list[int]] = field(default_factory=dict)
    arrivals: dict[str, list[int]] = field(default_factory=dict)
    published: dict[str, list[int]] = field(default_factory=dict)
    foreign_starts: int = 0

    def add_starts(self, lines: Iterable[tuple[str, int, int, str]]) -> None:
        for run_id, _attempt, started_ms, _worker in lines:
            if run_id in self.expected:
                self.starts.setdefault(run_id, []).append(started_ms)
            else:
                self.foreign_starts += 1

    def add_arrivals(self, records: Iterable[tuple[str, int]]) -> None:
        for key, arrival_ms in records:
            if key in self.expected:
                self.arrivals.setdefault(key, []).append(arrival_ms)

    def complete(self, http: bool) -> bool:
        if len(self.starts) < len(self.expected):
            return False
        return not http or len(self.arrivals) >= len(self.expected)


def lag_stats(lags_ms: Sequence[float]) -> dict[str, float]:
    return {
        "count": len(lags_ms),
        "min_s": (min(lags_ms) / 1000) if lags_ms else math.nan,  # signed: < 0 is early
        "p50_s": common.percentile(lags_ms, 50) / 1000,
        "p90_s": common.percentile(lags_ms, 90) / 1000,
        "p99_s": common.percentile(lags_ms, 99) / 1000,
        "max_s": (max(lags_ms) / 1000) if lags_ms else math.nan,
    }


def report(
    environment: Any,
    *,
    suite: str,
    title: str,
    ledger: RunLedger,
    http: bool,
    origin_ms: int,
    window_s: int,
    by_start: bool,
    describe: list[str],
    extra: dict[str, Any],
) -> bool:
    """Fire the Locust statistics, write summary.md/json and the plots; True if passed.

    Lags go to Locust as custom requests (type `lag`): each run's scheduled->started and
    scheduled->published (and scheduled->arrived at the ledger endpoint for http tasks),
    also per `window_s` window counted from `origin_ms` (T): of the instant each run
    started (`by_start`: the storm, whose runs share one scheduled second) or of its
    scheduled time (steady). Dropped runs and runs started twice are failures."""
    options = environment.parsed_options
    first_start = {r: min(s) for r, s in ledger.starts.items()}
    start_lags = {r: first_start[r] - ledger.expected[r] for r in first_start}
    publish_lags = {r: min(ts) - ledger.expected[r] for r, ts in ledger.published.items() if ts}
    arrival_lags = {r: min(a) - ledger.expected[r] for r, a in ledger.arrivals.items()}
    dropped = sorted(set(ledger.expected) - set(ledger.starts))
    twice = sorted(r for r, s in ledger.starts.items() if len(s) > 1)
    effect_dropped = sorted(set(ledger.expected) - set(ledger.arrivals)) if http else []
    effect_twice = sorted(r for r, a in ledger.arrivals.items() if len(a) > 1) if http else []
    published_twice = sum(1 for ts in ledger.published.values() if len(ts) > 1)

    for lags, name in (
        (start_lags, "scheduled->started"),
        (publish_lags, "scheduled->published"),
        (arrival_lags, "scheduled->arrived (ledger endpoint)"),
    ):
        for run_id, lag in lags.items():
            if lag < 0:  # published (or started, on a skewed clock) ahead of its second
                common.fire(environment, "lead", f"{name.split('->')[1]} before scheduled", -lag)
                continue
            common.fire(environment, "lag", name, lag)
            at = ledger.expected[run_id] + lag if by_start else ledger.expected[run_id]
            window = (at - origin_ms) // (window_s * 1000) * window_s
            label = (
                f"{'at' if by_start else 'scheduled'} T{window:+d}s"
                if window_s == 1
                else f"{'at' if by_start else 'scheduled'} T+{window}..{window + window_s}s"
            )
            common.fire(environment, "lag", f"{name} [{label}]", lag)
    for run_id in dropped:
        common.fire(environment, "ledger", "dropped (never started)", 0, Exception(run_id))
    for run_id in twice:
        common.fire(environment, "ledger", "started twice", 0, Exception(run_id))
    for run_id in effect_dropped:
        common.fire(
            environment, "ledger", "no request at the ledger endpoint", 0, Exception(run_id)
        )
    for run_id in effect_twice:
        common.fire(
            environment, "ledger", "two requests at the ledger endpoint", 0, Exception(run_id)
        )

    start = lag_stats(list(start_lags.values()))
    publish = lag_stats(list(publish_lags.values()))
    arrival = lag_stats(list(arrival_lags.values()))
    p99_ok = not math.isnan(start["p99_s"]) and start["p99_s"] <= options.target_p99
    passed = p99_ok and not dropped and not twice and not effect_dropped and not effect_twice
    environment.process_exit_code = 0 if passed else 1

    rows = []  # signed: a negative lag is ahead of the scheduled time (publish ahead, by design)
    for name, stats in (
        ("scheduled->started (journal)", start),
        ("scheduled->published (run topic)", publish),
        *((("scheduled->arrived (ledger endpoint)", arrival),) if http else ()),
    ):
        rows.append({"lag": name, **{k: v for k, v in stats.items()}})
    by_window: dict[int, list[int]] = {}
    for run_id, lag in start_lags.items():
        by_window.setdefault(first_start[run_id] // 1000 * 1000 - origin_ms, []).append(lag)
    started_rows = [
        {
            "started in second (from T)": f"T{offset // 1000:+d}s",
            "runs started": len(lags),
            "p50_s": common.percentile(lags, 50) / 1000,
            "p99_s": common.percentile(lags, 99) / 1000,
        }
        for offset, lags in sorted(by_window.items())
    ]
    verdict = [
        f"**{'PASS' if passed else 'FAIL'}**: p99 scheduled->started {start['p99_s']:.3f} s "
        f"(target {options.target_p99:g} s), dropped {len(dropped)}, started twice "
        f"{len(twice)}"
        + (
            f", no request at the ledger endpoint {len(effect_dropped)}, two requests "
            f"{len(effect_twice)}"
            if http
            else ""
        ),
        *describe,
        f"published twice (informational: a second message claims nothing) {published_twice}; "
        f"journal lines of other runs {ledger.foreign_starts}",
    ]
    directory = common.summary_dir(options)
    png = directory / f"{suite}_lag.png"
    offsets = {
        "started": [(first_start[r] - origin_ms) / 1000 for r in first_start],
        "published": [(min(ts) - origin_ms) / 1000 for ts in ledger.published.values() if ts],
    }
    if http:
        offsets["arrived"] = [(min(a) - origin_ms) / 1000 for a in ledger.arrivals.values()]
    plots.lag_plots(
        png,
        {
            "scheduled->started": [v / 1000 for v in start_lags.values()],
            "scheduled->published": [v / 1000 for v in publish_lags.values()],
            **({"scheduled->arrived": [v / 1000 for v in arrival_lags.values()]} if http else {}),
        },
        offsets,
        options.target_p99,
        title,
    )
    data = {
        "suite": suite,
        "passed": passed,
        "target_p99_s": options.target_p99,
        "expected": len(ledger.expected),
        "started": len(ledger.starts),
        "dropped": len(dropped),
        "started_twice": len(twice),
        "effect_dropped": len(effect_dropped),
        "effect_twice": len(effect_twice),
        "published_twice": published_twice,
        "start_lag": start,
        "publish_lag": publish,
        "arrival_lag": arrival if http else None,
        "per_second_started": started_rows,
        "dropped_ids": dropped[:100],
        "twice_ids": twice[:100],
        **extra,
    }
    sections = [
        ("Lags (all runs)", common.markdown_table(rows)),
        ("Runs started per second around T", common.markdown_table(started_rows)),
        (
            "Calls made (Locust)",
            common.markdown_table(
                [r for r in common.route_rows(environment) if r["type"] not in ("lag", "lead")]
            ),
        ),
    ]
    if "cpu_text" in extra:
        sections.append(("CPU", extra.pop("cpu_text")))
        data.pop("cpu_text", None)
    common.write_summary(directory, title, verdict, sections, data, [str(png)])
    print("\n".join(verdict))
    return passed
