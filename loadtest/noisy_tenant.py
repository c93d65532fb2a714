"""noisy: one tenant calls the API above its rate while another calls it at a normal
rate; the other's latency, and the noisy one's refusals.

Tenant B (`--tenant`, `--calm-users` users at `--calm-rate` calls/s in all) gets its own
jobs and lists them, as a dashboard would; tenant A (`--noisy-tenant`, `--noisy-users`
users at `--noisy-rate` calls/s in all) lists its jobs above the API rate the operator
gave it in the tenant policy file (`api_rate_per_s`, docs/tenants.md), and is answered
429 with Retry-After past it (not a failure here: it is the limit working; any other
status is). `--noisy-users 0` is "B alone", the baseline. The kit under test must run
with a tenant policy giving A a rate below `--noisy-rate`; the suite checks that A met
429s and fails (exit 1) if it met none, or if B met any error or passed
`--target-p99-ms`. `--noisy-within-limit` turns that check around: A calls at a rate
its limit allows, and any 429 fails the run (the baseline of "A at its rate").

A and B may run in two Locust processes (`--calm-users 0` runs A alone), so that A's
load generator does not delay B's own measurement: benchmarks/api_rate.py does.

    python -m loadtest noisy --host http://127.0.0.1:8080 --noisy-users 0 --run-time 60s \\
        --out out/loadtest/noisy-alone
    python -m loadtest noisy --host http://127.0.0.1:8080 --noisy-users 4 --run-time 60s \\
        --out out/loadtest/noisy-with-a
"""

from __future__ import annotations

import json
import random
import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from locust import FastHttpUser, constant, constant_throughput, events, task

from loadtest import common

TITLE = "noisy: a tenant over its API rate beside one at a normal rate"
NOISY = "noisy"
STATE: dict[str, Any] = {"statuses": {}, "calm_ms": []}


@events.request.add_listener
def _timed(name: str, response_time: float, exception: Any = None, **_: Any) -> None:
    """B's latencies, exact (Locust's own percentiles round to whole milliseconds, too
    coarse to compare two p99s of a few milliseconds within 10 %); with `--calm-log`,
    each one with the wall time it ended at and whether it failed."""
    if name.startswith("B ") and STATE.get("measuring"):
        STATE["calm_ms"].append(response_time)
        if "calm_log" in STATE:
            STATE["calm_log"].append((time.time(), response_time, exception is not None))


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    common.add_common_arguments(parser)
    g = parser.add_argument_group("noisy suite")
    g.add_argument("--noisy-tenant", default="lt-noisy", help="tenant A (over its rate)")
    g.add_argument("--noisy-token", default="", help="A's token (default: minted)")
    g.add_argument("--noisy-users", type=int, default=4, help="A's users (0: B alone)")
    g.add_argument("--noisy-rate", type=float, default=200, help="A's calls/s, all users")
    g.add_argument("--calm-users", type=int, default=10, help="B's users")
    g.add_argument("--calm-rate", type=float, default=100, help="B's calls/s, all users")
    g.add_argument("--target-p99-ms", type=float, default=0, help="fail if B's p99 passes")
    g.add_argument(
        "--calm-log", default="", help="write each B call's [end time, ms, failed] here (JSON)"
    )
    g.add_argument(
        "--noisy-within-limit",
        action="store_true",
        help="A calls within its limit: a 429 fails the run (default: A must meet 429s)",
    )


@events.init.add_listener
def _init(environment: Any, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    CalmUser.fixed_count = options.calm_users
    CalmUser.wait_time = constant_throughput(options.calm_rate / max(1, options.calm_users))
    NoisyUser.fixed_count = options.noisy_users
    NoisyUser.wait_time = (
        constant_throughput(options.noisy_rate / options.noisy_users)
        if options.noisy_users and options.noisy_rate > 0
        else constant(0)
    )


def _start(environment: Any) -> None:
    options = environment.parsed_options
    STATE["calm"] = common.bearer_token(options)
    noisy = types.SimpleNamespace(token=options.noisy_token, tenant=options.noisy_tenant)
    STATE["noisy"] = common.bearer_token(noisy)
    STATE["cpu"] = common.CpuMeter(environment.host)
    STATE["cpu"].start()
    STATE["run"] = uuid.uuid4().hex[:8]
    STATE["ready"] = 0
    STATE["environment"] = environment
    if options.calm_log:
        STATE["calm_log"] = []


events.test_start.add_listener(common.set_up_or_quit(_start))


class CalmUser(FastHttpUser):
    """Tenant B: reads its own jobs at a steady rate."""

    fixed_count = 10

    def on_start(self) -> None:
        self.rng = random.Random()
        prefix = f"lt-{STATE['run']}-{uuid.uuid4().hex[:6]}"
        jobs = [
            {
                "name": f"{prefix}-{i}",
                "schedule": {"cron": "0 3 * * *", "timezone": "UTC"},
                "task": {"type": "noop"},
            }
            for i in range(10)
        ]
        self.jobs: list[str] = []
        with self.client.request(
            "POST",
            "/v1/jobs:batch",
            json={"jobs": jobs},
            headers=common.headers(STATE["calm"]),
            name="POST /v1/jobs:batch (setup)",
            catch_response=True,
        ) as r:
            if r.status_code == 201:
                self.jobs = r.json()["job_ids"]
            else:
                r.failure(f"{r.status_code}: {r.text[:200]}")
        STATE["ready"] += 1
        if STATE["ready"] == self.environment.parsed_options.calm_users:
            self.environment.stats.reset_all()  # the setup is not the measure
            STATE["cpu"].start()
            STATE["measuring"] = True

    def _get(self, path: str, name: str) -> None:
        with self.client.request(
            "GET", path, headers=common.headers(STATE["calm"]), name=name, catch_response=True
        ) as r:
            if r.status_code != 200:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    @task(3)
    def get(self) -> None:
        if self.jobs:
            self._get(f"/v1/jobs/{self.rng.choice(self.jobs)}", "B GET /v1/jobs/{job_id}")

    @task(1)
    def list(self) -> None:
        self._get("/v1/jobs?limit=50", "B GET /v1/jobs")


class NoisyUser(FastHttpUser):
    """Tenant A: lists its jobs faster than the operator lets it."""

    fixed_count = 4

    @task
    def list(self) -> None:
        with self.client.request(
            "GET",
            "/v1/jobs?limit=50",
            headers=common.headers(STATE["noisy"]),
            name=f"{NOISY} A GET /v1/jobs",
            catch_response=True,
        ) as r:
            statuses = STATE["statuses"]
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if r.status_code == 429 and int(r.headers.get("Retry-After", "0")) >= 1:
                r.success()
            elif r.status_code != 200:
                r.failure(f"{r.status_code}: {r.text[:200]}")


@events.quitting.add_listener
def _report(environment: Any, **_: Any) -> None:
    if "cpu" not in STATE or environment.parsed_options is None:
        return
    options = environment.parsed_options
    meter: common.CpuMeter = STATE["cpu"]
    meter.stop()
    if options.calm_log:
        Path(options.calm_log).write_text(json.dumps(STATE["calm_log"]))
    rows = common.route_rows(environment)
    calm = [r for r in rows if r["name"].startswith("B ")]
    timed: list[float] = STATE["calm_ms"]
    p50, p99 = common.percentile(timed, 50), common.percentile(timed, 99)
    total = environment.stats.total
    duration = max(1e-9, (total.last_request_timestamp or time.time()) - total.start_time)
    calm_requests = sum(r["requests"] for r in calm)
    calm_errors = sum(r["failures"] for r in calm)
    statuses = {str(k): v for k, v in sorted(STATE["statuses"].items())}
    refused = STATE["statuses"].get(429, 0)
    noisy_other = sum(v for k, v in STATE["statuses"].items() if k not in (200, 429))
    misses = []
    if calm_errors:
        misses.append(f"B met {calm_errors} errors")
    if options.noisy_users and options.noisy_within_limit and refused:
        misses.append(f"A met {refused} 429s within its limit")
    elif options.noisy_users and not options.noisy_within_limit and not refused:
        misses.append("A met no 429: is the kit's tenant policy limiting it?")
    if noisy_other:
        misses.append(f"A met {noisy_other} answers other than 200 and 429")
    if options.target_p99_ms and p99 > options.target_p99_ms:
        misses.append(f"B's p99 {p99:.1f} ms > target {options.target_p99_ms:.0f} ms")
    passed = not misses
    environment.process_exit_code = 0 if passed else 1
    cpu_text, cpu_data = common.cpu_section(meter, calm_requests)
    verdict = [
        f"**{'PASS' if passed else 'FAIL'}**" + (f": {'; '.join(misses)}" if misses else ""),
        f"B: {options.calm_users} users at {options.calm_rate:g} calls/s; A: "
        + (
            f"{options.noisy_users} users at {options.noisy_rate:g} calls/s"
            if options.noisy_users
            else "none (B alone)"
        ),
        f"B: {calm_requests:,} requests in {duration:.1f} s, p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms, errors {calm_errors}; A's answers by status: {statuses or 'none'}",
    ]
    data = {
        "suite": "noisy",
        "passed": passed,
        "calm_users": options.calm_users,
        "calm_rate": options.calm_rate,
        "noisy_users": options.noisy_users,
        "noisy_rate": options.noisy_rate,
        "calm_requests": calm_requests,
        "calm_p50_ms": p50,
        "calm_p99_ms": p99,
        "calm_timed": len(timed),
        "calm_errors": calm_errors,
        "noisy_statuses": statuses,
        "duration_s": duration,
        "routes": rows,
        "cpu": cpu_data,
    }
    common.write_summary(
        common.summary_dir(options),
        TITLE,
        verdict,
        [("Per route (Locust)", common.markdown_table(rows)), ("CPU", cpu_text)],
        data,
    )
    print("\n".join(verdict), file=sys.stderr)
