"""api: a mix of jobs-API calls at a stated rate; p50/p99 and errors per route.

Mixes (`--mix`):
- `ops` (default): create 3, get 6, list 2, edit 1, pause+resume 2, run now 1, runs 2;
- `jobs`: issue 16's mix, create 3, get 6, runs 3, pause+resume 2, delete 1.

Each user starts with a few jobs of its own (one batch call) and works on them; created
jobs are cron jobs at 03:00 UTC with a noop task, so the kit's scheduler is not part of
the measure (run now does start a noop run). `--rate` spreads that many calls per second
over the users (0: as fast as they go). Exit code 1 on any error, or when a target given
(`--target-p99-ms`, `--target-rps`) is missed.

    python -m loadtest api --host http://127.0.0.1:8080 --rate 300 --run-time 60s \\
        --out out/loadtest/api
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from locust import FastHttpUser, constant, constant_throughput, events, task

from loadtest import common

TITLE = "api: the jobs API under a mix of calls"
MIXES = {
    "ops": {
        "create": 3,
        "get": 6,
        "list": 2,
        "edit": 1,
        "pause_resume": 2,
        "run_now": 1,
        "runs": 2,
    },
    "jobs": {"create": 3, "get": 6, "runs": 3, "pause_resume": 2, "delete": 1},
}
STATE: dict[str, Any] = {}


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    common.add_common_arguments(parser)
    g = parser.add_argument_group("api suite")
    g.add_argument("--mix", choices=sorted(MIXES), default="ops")
    g.add_argument("--rate", type=float, default=0, help="calls/s over all users (0: max)")
    g.add_argument("--api-users", type=int, default=20, help="users (python -m loadtest: -u)")
    g.add_argument("--target-p99-ms", type=float, default=0, help="fail above (0: none)")
    g.add_argument("--target-rps", type=float, default=0, help="fail below (0: none)")
    g.add_argument(
        "--measure-after-setup",
        action="store_true",
        help="count calls, times and CPU from when every user has made its jobs (the "
        "setup's burst of batch creates, one per user at once, is not the mix)",
    )


@events.init.add_listener
def _init(environment: Any, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    weights = MIXES[options.mix]
    JobsUser.tasks = [getattr(JobsUser, name) for name, w in weights.items() for _ in range(w)]
    calls_per_task = sum(weights.values()) / sum(
        w * (2 if name == "pause_resume" else 1) for name, w in weights.items()
    )
    if options.rate > 0:
        users = options.num_users or options.api_users
        JobsUser.wait_time = constant_throughput(options.rate * calls_per_task / users)
    else:
        JobsUser.wait_time = constant(0)


def _start(environment: Any) -> None:
    STATE["token"] = common.bearer_token(environment.parsed_options)
    STATE["cpu"] = common.CpuMeter(environment.host)
    STATE["cpu"].start()
    STATE["run"] = uuid.uuid4().hex[:8]
    STATE["ready"] = 0
    STATE["environment"] = environment


events.test_start.add_listener(common.set_up_or_quit(_start))


def _job(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": {"cron": "0 3 * * *", "timezone": "UTC"},
        "task": {"type": "noop"},
        "retry": {"max_attempts": 1},
    }


class JobsUser(FastHttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.rng = random.Random()
        self.prefix = f"lt-{STATE['run']}-{uuid.uuid4().hex[:6]}"
        self.count = 0
        self.jobs: list[str] = []
        body = {"jobs": [_job(self._name()) for _ in range(10)]}
        with self._call("POST", "/v1/jobs:batch", "POST /v1/jobs:batch (setup)", body) as r:
            if r.status_code == 201:
                self.jobs.extend(r.json()["job_ids"])
        STATE["ready"] += 1
        environment = STATE["environment"]
        options = environment.parsed_options
        if options.measure_after_setup and STATE["ready"] == options.num_users:
            environment.stats.reset_all()  # the setup's calls and the ramp's queue
            STATE["cpu"].start()

    def _name(self) -> str:
        self.count += 1
        return f"{self.prefix}-{self.count}"

    def _call(self, method: str, path: str, name: str, body: Any = None) -> Any:
        return self.client.request(
            method,
            path,
            json=body,
            headers=common.headers(STATE["token"]),
            name=name,
            catch_response=True,
        )

    def _some_job(self) -> str | None:
        return self.rng.choice(self.jobs) if self.jobs else None

    def create(self) -> None:
        with self._call("POST", "/v1/jobs", "POST /v1/jobs", _job(self._name())) as r:
            if r.status_code == 201:
                self.jobs.append(r.json()["job_id"])
            else:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    @task
    def get(self) -> None:
        if job := self._some_job():
            self._expect(self._call("GET", f"/v1/jobs/{job}", "GET /v1/jobs/{job_id}"), 200)

    def list(self) -> None:
        self._expect(self._call("GET", "/v1/jobs?limit=50", "GET /v1/jobs"), 200)

    def runs(self) -> None:
        if job := self._some_job():
            path = f"/v1/jobs/{job}/runs?limit=20"
            self._expect(self._call("GET", path, "GET /v1/jobs/{job_id}/runs"), 200)

    def edit(self) -> None:
        if job := self._some_job():
            body = {"timeout_s": self.rng.randint(60, 3600)}
            self._expect(
                self._call("PATCH", f"/v1/jobs/{job}", "PATCH /v1/jobs/{job_id}", body), 200
            )

    def pause_resume(self) -> None:
        if job := self._some_job():
            for paused, label in ((True, "pause"), (False, "resume")):
                name = f"PATCH /v1/jobs/{{job_id}} ({label})"
                self._expect(self._call("PATCH", f"/v1/jobs/{job}", name, {"paused": paused}), 200)

    def run_now(self) -> None:
        if job := self._some_job():
            path = f"/v1/jobs/{job}/runs"
            self._expect(self._call("POST", path, "POST /v1/jobs/{job_id}/runs"), 202)

    def delete(self) -> None:
        if len(self.jobs) > 5:
            job = self.jobs.pop(self.rng.randrange(len(self.jobs)))
            self._expect(self._call("DELETE", f"/v1/jobs/{job}", "DELETE /v1/jobs/{job_id}"), 204)

    @staticmethod
    def _expect(context: Any, status: int) -> None:
        with context as response:
            if response.status_code != status:
                response.failure(f"{response.status_code}: {response.text[:200]}")


@events.quitting.add_listener
def _report(environment: Any, **_: Any) -> None:
    if "cpu" not in STATE or environment.parsed_options is None:
        return
    options = environment.parsed_options
    meter: common.CpuMeter = STATE["cpu"]
    meter.stop()
    routes = [r for r in common.route_rows(environment) if "(setup)" not in r["name"]]
    total = environment.stats.total
    setup = sum(r["requests"] for r in common.route_rows(environment) if "(setup)" in r["name"])
    requests = total.num_requests - setup
    duration = max(1e-9, (total.last_request_timestamp or time.time()) - total.start_time)
    rps = requests / duration
    p99 = max((r["p99_ms"] for r in routes), default=0)
    # over the mix's calls: the setup's batch creates (one per user, while the users
    # start) are not the mix, and were 0.8 % of a 12 s run's calls, enough to move a p99
    overall_p50, overall_p99 = common.calls_percentiles(environment, ("(setup)",))
    errors = sum(r["failures"] for r in routes)
    misses = []
    if errors:
        misses.append(f"{errors} errors")
    if options.target_p99_ms and overall_p99 > options.target_p99_ms:
        misses.append(f"p99 {overall_p99:.0f} ms > target {options.target_p99_ms:.0f} ms")
    if options.target_rps and rps < options.target_rps:
        misses.append(f"{rps:,.0f} requests/s < target {options.target_rps:,.0f}")
    passed = not misses
    environment.process_exit_code = 0 if passed else 1
    cpu_text, cpu_data = common.cpu_section(meter, requests)
    verdict = [
        f"**{'PASS' if passed else 'FAIL'}**" + (f": {'; '.join(misses)}" if misses else ""),
        f"mix `{options.mix}` ({', '.join(f'{k} {v}' for k, v in MIXES[options.mix].items())}), "
        f"{options.num_users} users, asked rate "
        + (f"{options.rate:g} calls/s" if options.rate else "as fast as they go"),
        f"{requests:,} requests in {duration:.1f} s: {rps:,.0f} requests/s; "
        f"p50 {overall_p50:.0f} ms, p99 {overall_p99:.0f} ms (worst route p99 {p99:.0f} ms); "
        f"errors {errors}",
    ]
    directory = common.summary_dir(options)
    data = {
        "suite": "api",
        "passed": passed,
        "mix": options.mix,
        "users": options.num_users,
        "rate_asked": options.rate,
        "measured_from": "setup done" if options.measure_after_setup else "start",
        "requests": requests,
        "rps": rps,
        "p50_ms": overall_p50,
        "p99_ms": overall_p99,
        "errors": errors,
        "routes": routes,
        "cpu": cpu_data,
    }
    common.write_summary(
        directory,
        TITLE,
        verdict,
        [("Per route (Locust)", common.markdown_table(routes)), ("CPU", cpu_text)],
        data,
    )
    print("\n".join(verdict), file=sys.stderr)
