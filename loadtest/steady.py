"""steady: `--rate` runs per second for `--duration` seconds, with the storm's report.

`--rate` jobs with `every_s = 1` anchored at T are created through the bulk endpoint
before T; each owes one run per second from T to T + duration (run ids computed from the
schedule, so a run the scheduler never fired counts as dropped). After the window the
jobs are deleted; runs after it are not counted. Lags are also reported per 10 s window
of the scheduled time. Exit code 1 when p99 scheduled->started passes `--target-p99`
(seconds, default 0.25) or a run was dropped or started twice; 2 when it could not be
set up.

    python -m loadtest steady --host http://127.0.0.1:8080 --rate 2000 --duration 180 \\
        --journal-dir /tmp/journal --out out/loadtest/steady
"""

from __future__ import annotations

import math
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gevent
import gevent.pool
from locust import events

from loadtest import common, runs

TITLE = "steady: a rate of runs per second"
STATE: dict[str, Any] = {}


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    common.add_common_arguments(parser)
    g = runs.add_run_arguments(parser, target_p99_s=0.25)
    g.add_argument("--rate", type=int, default=500, help="runs per second (jobs every 1 s)")
    g.add_argument("--duration", type=int, default=60, help="seconds of runs")
    g.add_argument(
        "--settle-s", type=float, default=12, help="jobs exist this long before T (scan-ahead, +2)"
    )


class SteadyUser(runs.RunTestUser):
    state = STATE
    concurrency = 16

    def _delete(self, job_ids: list[str]) -> None:
        """Stop the jobs after the window: deleted, 16 calls at a time."""
        pool = gevent.pool.Pool(16)
        headers = common.headers(STATE["token"])

        def delete(job_id: str) -> None:
            with self.client.delete(
                f"/v1/jobs/{job_id}",
                headers=headers,
                name="DELETE /v1/jobs/{job_id}",
                catch_response=True,
            ) as response:
                if response.status_code not in (204, 404):
                    response.failure(f"{response.status_code}")

        for job_id in job_ids:
            pool.spawn(delete, job_id)
        pool.join()

    def drive(self) -> None:
        from kit.core.ids import run_id
        from kit.settings import load_settings

        options = self.environment.parsed_options
        directory = common.summary_dir(options)
        STATE["token"] = common.bearer_token(options)
        journal = runs.JournalReader(runs.journal_dir(options))
        journal.skip_existing()
        endpoint = (
            runs.LedgerEndpoint(directory, options.ledger_bin) if options.task == "http" else None
        )
        STATE["endpoint"] = endpoint
        spec = runs.task_body(options, endpoint)
        bootstrap = load_settings().kafka_bootstrap
        topic = f"{options.topic_prefix}.{options.priority}"
        offsets = runs.topic_offsets(bootstrap, topic)

        lead_s = options.lead_s or (options.settle_s + 4 + options.rate / 2000)
        t0_ms = math.ceil(time.time() + lead_s) * 1000
        anchor = datetime.fromtimestamp(t0_ms / 1000, UTC).isoformat().replace("+00:00", "Z")
        tag = uuid.uuid4().hex[:8]
        created_from = time.time()
        names = [f"steady-{tag}-{i}" for i in range(options.rate)]
        schedule = {"every_s": 1, "anchor": anchor}
        job_ids = runs.create_jobs(self, STATE["token"], names, schedule, spec, options)
        created_s = time.time() - created_from
        margin_s = t0_ms / 1000 - time.time()
        if margin_s < options.settle_s:
            self._delete(job_ids)
            raise runs.SetupError(
                f"the {options.rate:,} jobs were ready {margin_s:.1f} s before T, less than "
                f"--settle-s {options.settle_s:g}: raise --lead-s (now {lead_s:.0f})"
            )
        expected = {
            run_id(job, t0_ms + k * 1000): t0_ms + k * 1000
            for job in job_ids
            for k in range(options.duration)
        }
        ledger = runs.RunLedger(expected)
        meter = common.CpuMeter(self.environment.host)
        gevent.sleep(max(0.0, margin_s - 1.0))
        meter.start()
        end_ms = t0_ms + options.duration * 1000
        while time.time() * 1000 < end_ms:  # read as the runs come: the journal grows
            ledger.add_starts(journal.read_new())
            if endpoint is not None:
                ledger.add_arrivals(endpoint.read_new())
            gevent.sleep(1.0)
        runs.wait_for_runs(ledger, journal, endpoint, end_ms + int(options.drain_s * 1000), end_ms)
        meter.stop()
        self._delete(job_ids)
        ledger.published = runs.publish_times(bootstrap, topic, offsets, set(expected))
        if endpoint is not None:
            endpoint.stop()
            ledger.add_arrivals(endpoint.read_new())
        cpu_text, cpu_data = common.cpu_section(meter, len(expected))
        STATE["passed"] = runs.report(
            self.environment,
            suite="steady",
            title=f"{TITLE}: {options.rate:,}/s of {options.task} runs for {options.duration} s",
            ledger=ledger,
            http=endpoint is not None,
            origin_ms=t0_ms,
            window_s=10,
            by_start=False,
            describe=[
                f"{options.rate:,} `{options.task}` jobs every 1 s from T = {anchor} for "
                f"{options.duration} s ({len(expected):,} runs), created through POST "
                f"/v1/jobs:batch in {created_s:.1f} s, ready {margin_s:.1f} s before T",
                "CPU during the runs: "
                + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(meter.spent.items()))
                + f" over {meter.wall_s:.1f} s; per run "
                + ", ".join(
                    f"{k} {1000 * v / max(1, len(expected)):.3f} ms"
                    for k, v in sorted(meter.spent.items())
                ),
            ],
            extra={
                "rate": options.rate,
                "duration_s": options.duration,
                "task": options.task,
                "t0": anchor,
                "create_s": created_s,
                "cpu": cpu_data,
                "cpu_text": cpu_text.replace("requests", "runs"),
            },
        )


events.quitting.add_listener(runs.exit_code_on_quit(STATE))
