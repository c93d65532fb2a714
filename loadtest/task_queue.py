"""queue: producers and pull workers of the task-queue API, with a ledger of every ack.

Producers enqueue for `--duration` seconds (one task per call, or `--enqueue-batch N` per
`POST /v1/queues/{q}/tasks:batch`); pull workers lease up to `--lease-max`, heartbeat a
few, nack a few once (retryable), and ack the rest (one per call, or `--ack-batch` per
`POST /v1/tasks:ack`). Then the queue drains and the monitor checks the ledger: every
enqueued task acked exactly once (a 200 ack of a task already acked under another lease
is a duplicate), none lost, and `/v1/queues/{q}/stats` agreeing (nothing queued or leased,
dead letters = the ledger's). Exit code 1 when the ledger fails or a target given
(`--target-p99-ms`, `--target-tasks-per-s`) is missed.

    python -m loadtest queue --host http://127.0.0.1:8080 --out out/loadtest/queue
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gevent
from locust import FastHttpUser, constant, events, task

from loadtest import common, plots

TITLE = "queue: enqueue, lease, ack through the task-queue API"


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    common.add_common_arguments(parser)
    g = parser.add_argument_group("queue suite")
    g.add_argument("--queue-name", default="", help="queue (default: a new lt-<random> queue)")
    g.add_argument("--producers", type=int, default=4, help="producer users")
    g.add_argument("--consumers", type=int, default=8, help="pull-worker users")
    g.add_argument("--enqueue-batch", type=int, default=1, help="tasks per enqueue call")
    g.add_argument("--ack-batch", type=int, default=1, help="acks per call (1: one at a time)")
    g.add_argument("--lease-max", type=int, default=10, help="max_tasks per lease call")
    g.add_argument("--rate", type=float, default=0, help="tasks/s enqueued in all (0: max)")
    g.add_argument("--duration", type=float, default=30, help="seconds of enqueueing")
    g.add_argument("--drain-timeout", type=float, default=60, help="seconds to drain after")
    g.add_argument("--nack-fraction", type=float, default=0.01, help="nacked once, retryable")
    g.add_argument("--heartbeat-fraction", type=float, default=0.01, help="heartbeat first")
    g.add_argument("--target-p99-ms", type=float, default=0, help="fail above (0: no target)")
    g.add_argument("--target-tasks-per-s", type=float, default=0, help="fail below (0: none)")


class Ledger:
    """What the clients saw: tasks enqueued, acks answered 200, nacks, refusals."""

    def __init__(self) -> None:
        self.enqueued: set[str] = set()
        self.acked: Counter[str] = Counter()
        self.nacked = 0
        self.refused = 0  # 409 lease_refused (an expired lease, leased again)
        self.first_enqueue = 0.0
        self.produce_end = 0.0
        self.ack_times: list[float] = []
        self.enqueue_times: list[float] = []

    def enqueue(self, task_ids: list[str]) -> None:
        now = time.time()
        if not self.first_enqueue:
            self.first_enqueue = now
        self.enqueued.update(task_ids)
        self.enqueue_times.extend([now] * len(task_ids))

    def ack(self, task_id: str) -> None:
        self.acked[task_id] += 1
        self.ack_times.append(time.time())


LEDGER = Ledger()
STATE: dict[str, Any] = {}


def _start(environment: Any) -> None:
    options = environment.parsed_options
    STATE["queue"] = options.queue_name or f"lt-{uuid.uuid4().hex[:10]}"
    STATE["token"] = common.bearer_token(options)
    STATE["produce_until"] = time.monotonic() + options.duration
    STATE["producing"] = True
    STATE["cpu"] = common.CpuMeter(environment.host)
    STATE["cpu"].start()
    STATE["t0"] = time.time()


events.test_start.add_listener(common.set_up_or_quit(_start))


@events.init.add_listener
def _init(environment: Any, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    Producer.fixed_count = options.producers
    Consumer.fixed_count = options.consumers
    Monitor.fixed_count = 1


def _json(response: Any) -> Any:
    try:
        return response.json()
    except Exception:  # a body that is not JSON: the caller marks the request failed
        return None


class _Client(FastHttpUser):
    abstract = True

    def _post(self, path: str, body: Any, name: str) -> Any:
        with self.client.post(
            path,
            json=body,
            headers=common.headers(STATE["token"]),
            name=name,
            catch_response=True,
        ) as response:
            data = _json(response)
            if response.status_code == 409 and isinstance(data, dict):
                LEDGER.refused += 1
                response.success()  # an expired lease is the protocol, not an error
                return None
            if response.status_code not in (200, 201) or data is None:
                response.failure(f"{response.status_code}: {response.text[:200]}")
                return None
            return data


class Producer(_Client):
    wait_time = constant(0)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        per_call = max(1, options.enqueue_batch)
        self.seq = 0
        self.interval = 0.0
        if options.rate > 0:
            self.interval = options.producers * per_call / options.rate
        self.next_at = time.monotonic()

    @task
    def produce(self) -> None:
        options = self.environment.parsed_options
        if time.monotonic() >= STATE["produce_until"]:
            STATE["producing"] = False
            if not LEDGER.produce_end:
                LEDGER.produce_end = time.time()
            gevent.sleep(0.5)
            return
        if self.interval:
            delay = self.next_at - time.monotonic()
            if delay > 0:
                gevent.sleep(delay)
            self.next_at = max(self.next_at + self.interval, time.monotonic() - 1)
        queue = STATE["queue"]
        if options.enqueue_batch <= 1:
            self.seq += 1
            data = self._post(
                f"/v1/queues/{queue}/tasks",
                {"payload": {"by": id(self), "seq": self.seq}},
                "POST /v1/queues/{queue}/tasks",
            )
            if data:
                LEDGER.enqueue([data["task_id"]])
            return
        tasks = []
        for _ in range(options.enqueue_batch):
            self.seq += 1
            tasks.append({"payload": {"by": id(self), "seq": self.seq}})
        data = self._post(
            f"/v1/queues/{queue}/tasks:batch",
            {"tasks": tasks},
            "POST /v1/queues/{queue}/tasks:batch",
        )
        if data:
            LEDGER.enqueue([t["task_id"] for t in data["tasks"]])


class Consumer(_Client):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.worker_id = f"lt-{uuid.uuid4().hex[:8]}"
        self.rng = random.Random()

    @task
    def work(self) -> None:
        options = self.environment.parsed_options
        queue = STATE["queue"]
        data = self._post(
            f"/v1/queues/{queue}/lease",
            {"worker_id": self.worker_id, "max_tasks": options.lease_max, "lease_sec": 60},
            "POST /v1/queues/{queue}/lease",
        )
        leased = (data or {}).get("tasks", [])
        if not leased:
            gevent.sleep(0.05 if STATE.get("producing") else 0.2)
            return
        to_ack = []
        for item in leased:
            roll = self.rng.random()
            if item["attempt"] == 1 and roll < options.nack_fraction:
                if self._post(
                    f"/v1/tasks/{item['task_id']}/nack",
                    {"lease_token": item["lease_token"], "retryable": True, "error": "load test"},
                    "POST /v1/tasks/{task_id}/nack",
                ):
                    LEDGER.nacked += 1
                continue
            if roll > 1 - options.heartbeat_fraction:
                self._post(
                    f"/v1/tasks/{item['task_id']}/heartbeat",
                    {"lease_token": item["lease_token"], "extend_sec": 60},
                    "POST /v1/tasks/{task_id}/heartbeat",
                )
            to_ack.append(item)
        if options.ack_batch <= 1:
            for item in to_ack:
                if self._post(
                    f"/v1/tasks/{item['task_id']}/ack",
                    {"lease_token": item["lease_token"], "result": {"ok": True}},
                    "POST /v1/tasks/{task_id}/ack",
                ):
                    LEDGER.ack(item["task_id"])
            return
        for start in range(0, len(to_ack), options.ack_batch):
            chunk = to_ack[start : start + options.ack_batch]
            answer = self._post(
                "/v1/tasks:ack",
                {
                    "acks": [
                        {"task_id": i["task_id"], "lease_token": i["lease_token"]} for i in chunk
                    ]
                },
                "POST /v1/tasks:ack",
            )
            for result in (answer or {}).get("results", []):
                if result.get("status") == "done":
                    LEDGER.ack(result["task_id"])
                else:
                    LEDGER.refused += 1


class Monitor(_Client):
    """Waits for the enqueueing to end and the queue to drain, then checks the ledger."""

    wait_time = constant(0.5)

    @task
    def watch(self) -> None:
        if STATE.get("done") or STATE["producing"]:
            return
        options = self.environment.parsed_options
        stats = self._stats()
        if stats is None:
            return
        drained = stats["queued"] == 0 and stats["leased"] == 0
        deadline = LEDGER.produce_end + options.drain_timeout if LEDGER.produce_end else None
        if drained or (deadline and time.time() > deadline):
            STATE["done"] = True
            STATE["end"] = time.time()
            STATE["final_stats"] = stats
            STATE["drained"] = drained
            common.quit_soon(self.environment)

    def _stats(self) -> dict[str, Any] | None:
        with self.client.get(
            f"/v1/queues/{STATE['queue']}/stats",
            headers=common.headers(STATE["token"]),
            name="GET /v1/queues/{queue}/stats",
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                response.failure(f"{response.status_code}")
                return None
            return response.json()


@events.quitting.add_listener
def _report(environment: Any, **_: Any) -> None:
    if "cpu" not in STATE or environment.parsed_options is None:
        return
    options = environment.parsed_options
    meter: common.CpuMeter = STATE["cpu"]
    meter.stop()
    stats = STATE.get("final_stats") or {}
    acked_once = sum(1 for n in LEDGER.acked.values() if n == 1)
    twice = sorted(t for t, n in LEDGER.acked.items() if n > 1)
    lost, held = unacked_account(len(LEDGER.enqueued - set(LEDGER.acked)), stats)
    drained = bool(STATE.get("drained"))
    unknown = sorted(set(LEDGER.acked) - LEDGER.enqueued)
    stats_ok = (
        bool(stats)
        and stats.get("queued") == 0
        and stats.get("leased") == 0
        and stats.get("dlq") == 0
    )
    routes = common.route_rows(environment)
    calls = [r for r in routes if r["type"] in ("POST", "GET")]
    requests = sum(r["requests"] for r in calls)
    worst_p99 = max((r["p99_ms"] for r in calls if "stats" not in r["name"]), default=0)
    _, all_calls_p99 = common.calls_percentiles(environment, ("stats",))
    produce_s = max(1e-9, (LEDGER.produce_end or time.time()) - (LEDGER.first_enqueue or 0))
    end = STATE.get("end") or time.time()
    span_s = max(1e-9, end - (LEDGER.first_enqueue or end))
    enqueue_rate = len(LEDGER.enqueued) / produce_s
    ack_rate = len(LEDGER.acked) / span_s
    steady = _steady_ack_rate()
    verdict_ok = not twice and not lost and not unknown and stats_ok and drained
    misses = []
    if options.target_p99_ms and worst_p99 > options.target_p99_ms:
        misses.append(f"p99 per call {worst_p99:.0f} ms > target {options.target_p99_ms:.0f} ms")
    end_to_end = min(enqueue_rate, ack_rate)
    if options.target_tasks_per_s and end_to_end < options.target_tasks_per_s:
        misses.append(
            f"{end_to_end:,.0f} tasks/s end to end < target {options.target_tasks_per_s:,.0f}"
        )
    passed = bool(verdict_ok) and not misses
    environment.process_exit_code = 0 if passed else 1
    directory = common.summary_dir(options)
    cpu_text, cpu_data = common.cpu_section(meter, requests)
    enqueue = (
        "one task per call"
        if options.enqueue_batch <= 1
        else f"{options.enqueue_batch} per batch call"
    )
    acks = "one per call" if options.ack_batch <= 1 else f"up to {options.ack_batch} per call"
    mode = f"enqueue {enqueue}, lease up to {options.lease_max}, ack {acks}"
    verdict = [
        f"**{'PASS' if passed else 'FAIL'}**" + (f": {'; '.join(misses)}" if misses else ""),
        f"calls: {mode}; {options.producers} producers, {options.consumers} pull workers, "
        f"queue `{STATE['queue']}`",
        f"enqueued {len(LEDGER.enqueued):,} in {produce_s:.1f} s ({enqueue_rate:,.0f} tasks/s); "
        f"acked {len(LEDGER.acked):,} ({ack_rate:,.0f} tasks/s from first enqueue to drained; "
        f"{steady:,.0f} tasks/s while producing)",
        f"ledger: acked exactly once {acked_once:,}, acked twice {len(twice)}, lost (not "
        f"acked, no longer in the queue) {lost}, acks of unknown tasks {len(unknown)}, "
        f"nacked once {LEDGER.nacked}, lease refusals {LEDGER.refused}",
        f"stats at the end: {stats} ({_stats_verdict(stats, drained, held)})",
        f"worst p99 per call (stats polls aside): {worst_p99:.0f} ms",
    ]
    png = directory / "queue_throughput.png"
    plots.rate_plot(
        png,
        {"enqueued": LEDGER.enqueue_times, "acked": LEDGER.ack_times},
        LEDGER.first_enqueue,
        "tasks per second",
    )
    data = {
        "suite": "queue",
        "passed": passed,
        "mode": mode,
        "options": {k: getattr(options, k) for k in _OPTION_KEYS},
        "enqueued": len(LEDGER.enqueued),
        "acked": len(LEDGER.acked),
        "acked_twice": len(twice),
        "lost": lost,
        "drained": drained,
        "held_when_drain_ended": held,
        "nacked": LEDGER.nacked,
        "refused": LEDGER.refused,
        "enqueue_tasks_per_s": enqueue_rate,
        "ack_tasks_per_s": ack_rate,
        "steady_ack_tasks_per_s": steady,
        "worst_p99_ms": worst_p99,
        "p99_all_calls_ms": all_calls_p99,
        "final_stats": stats,
        "routes": routes,
        "cpu": cpu_data,
    }
    common.write_summary(
        directory,
        TITLE,
        verdict,
        [("Per call (Locust)", common.markdown_table(routes)), ("CPU", cpu_text)],
        data,
        [str(png)],
    )
    print("\n".join(verdict), file=sys.stderr)


def unacked_account(unacked: int, stats: dict[str, Any]) -> tuple[int, int]:
    """(lost, held): of the tasks enqueued and never acked, those the queue no longer holds
    are lost; those it still holds (queued, leased, dead letter, per its final stats) are
    late. The queue is this run's own, so every task it holds is one of the ledger's."""
    held = sum(int(stats.get(key) or 0) for key in ("queued", "leased", "dlq"))
    held = min(held, unacked)  # an ack answered after the last stats poll
    return unacked - held, held


def _stats_verdict(stats: dict[str, Any], drained: bool, held: int) -> str:
    if not stats:
        return "no stats read: the queue's side is unchecked"
    if not drained:
        return (
            f"the queue did not drain within --drain-timeout: it still holds {held:,} tasks "
            "not acked, late rather than lost; more was offered than this setup acks "
            "(a lower --rate, or a longer --drain-timeout)"
        )
    if stats.get("dlq"):
        return "INCONSISTENT with the ledger: dead letters, which no nack of this suite makes"
    return "consistent with the ledger: nothing queued or leased, no dead letter"


_OPTION_KEYS = (
    "producers",
    "consumers",
    "enqueue_batch",
    "ack_batch",
    "lease_max",
    "rate",
    "duration",
    "nack_fraction",
    "heartbeat_fraction",
)


def _steady_ack_rate() -> float:
    """Acks per second over the enqueueing window, its first and last 10 % left out."""
    if not LEDGER.first_enqueue or not LEDGER.produce_end:
        return 0.0
    span = LEDGER.produce_end - LEDGER.first_enqueue
    lo, hi = LEDGER.first_enqueue + 0.1 * span, LEDGER.produce_end - 0.1 * span
    if hi <= lo:
        return 0.0
    return sum(1 for t in LEDGER.ack_times if lo <= t < hi) / (hi - lo)
