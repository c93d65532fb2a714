"""storm: N jobs due at the same second T, created through the bulk endpoint, then every
run's trigger lag from the ledgers, as Locust statistics.

- scheduled->started: the workers' execution journal (`CRONFLEET_EXECUTION_JOURNAL_DIR`,
  a line per task start, on the worker's estimate of the database clock);
- scheduled->published: the run topic's message timestamps;
- for `--task http`: each run POSTs to the ledger endpoint (loadtest/ledger, Go) on
  loopback, which records the Idempotency-Key (the run id) and the arrival instant:
  scheduled->arrived, and drops and duplicates of the effect itself. The kit's workers
  must be allowed to reach loopback (`CRONFLEET_HTTP_ALLOW_HOSTS=127.0.0.1`, or the
  tenant's `http_allow_hosts` in the task policy).

Exit code 1 when p99 scheduled->started passes `--target-p99` (seconds, default 1) or a
run was dropped or started twice; 2 when the storm could not be set up as asked (the
jobs were not all created `--settle-s` before T, no journal).

    python -m loadtest storm --host http://127.0.0.1:8080 --jobs 50000 \\
        --journal-dir /tmp/journal --out out/loadtest/storm
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
from locust import events

from loadtest import common, runs

TITLE = "storm: N runs due at the same second"
STATE: dict[str, Any] = {}


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    common.add_common_arguments(parser)
    g = runs.add_run_arguments(parser, target_p99_s=1.0)
    g.add_argument("--jobs", type=int, default=50_000, help="runs due at the same second")
    g.add_argument(
        "--schedule",
        choices=("at", "cron"),
        default="at",
        help="at: one-off jobs due at T; cron: hourly cron jobs of one expression (jitter 0) "
        "whose next fire is T (T then falls on a whole minute)",
    )
    g.add_argument(
        "--settle-s",
        type=float,
        default=12,
        help="the jobs must all exist this long before T "
        "(more than the scheduler's scan-ahead, 10 s, so all of a run's work before T is done)",
    )


class StormUser(runs.RunTestUser):
    state = STATE
    concurrency = 16

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

        lead_s = options.lead_s or (options.settle_s + 4 + options.jobs / 2000)
        due_ms = math.ceil(time.time() + lead_s) * 1000
        if options.schedule == "cron":
            due_ms = math.ceil(due_ms / 60_000) * 60_000  # a cron fires on whole minutes
        due = datetime.fromtimestamp(due_ms / 1000, UTC)
        at = due.isoformat().replace("+00:00", "Z")
        schedule = (
            {"cron": f"{due.minute} * * * *", "timezone": "UTC"}
            if options.schedule == "cron"
            else {"at": at}
        )
        tag = uuid.uuid4().hex[:8]
        names = [f"storm-{tag}-{i}" for i in range(options.jobs)]
        created_from = time.time()
        job_ids = runs.create_jobs(self, STATE["token"], names, schedule, spec, options)
        created_s = time.time() - created_from
        margin_s = due_ms / 1000 - time.time()
        if margin_s < options.settle_s:
            raise runs.SetupError(
                f"the {options.jobs:,} jobs took {created_s:.1f} s to create and were ready "
                f"{margin_s:.1f} s before T, less than --settle-s {options.settle_s:g}: raise "
                f"--lead-s (now {lead_s:.0f})"
            )
        meter = common.CpuMeter(self.environment.host)
        gevent.sleep(max(0.0, margin_s - 1.0))
        meter.start()  # from 1 s before T: the CPU the storm costs after its second
        ledger = runs.RunLedger({run_id(job, due_ms): due_ms for job in job_ids})
        runs.wait_for_runs(ledger, journal, endpoint, due_ms + int(options.drain_s * 1000), due_ms)
        meter.stop()
        ledger.published = runs.publish_times(bootstrap, topic, offsets, set(ledger.expected))
        if endpoint is not None:
            endpoint.stop()
            ledger.add_arrivals(endpoint.read_new())
        cpu_text, cpu_data = common.cpu_section(meter, len(ledger.expected))
        cpu_text = cpu_text.replace("requests", "runs")
        STATE["passed"] = runs.report(
            self.environment,
            suite="storm",
            title=f"{TITLE}: {options.jobs:,} {options.task} runs",
            ledger=ledger,
            http=endpoint is not None,
            origin_ms=due_ms,
            window_s=1,
            by_start=True,
            describe=[
                f"{options.jobs:,} {kind_text(options.schedule)} `{options.task}` jobs due at"
                f" T = {at}, created "
                f"through POST /v1/jobs:batch ({options.batch_size:,} per call) in "
                f"{created_s:.1f} s, ready {margin_s:.1f} s before T",
                f"ledgers: the execution journal in `{journal.directory}`, the run topic "
                f"`{topic}`" + (", the ledger endpoint (Go) on loopback" if endpoint else ""),
                "CPU from T-1 s until the last run was seen: "
                + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(meter.spent.items()))
                + f" over {meter.wall_s:.1f} s (machine share "
                + ", ".join(f"{k} {v:.2f}" for k, v in sorted(meter.shares().items()))
                + ")",
            ],
            extra={
                "jobs": options.jobs,
                "task": options.task,
                "due": at,
                "create_s": created_s,
                "cpu": cpu_data,
                "cpu_text": cpu_text,
            },
        )


events.quitting.add_listener(runs.exit_code_on_quit(STATE))


def kind_text(schedule: str) -> str:
    return "hourly cron (one expression, jitter 0)" if schedule == "cron" else "one-off"
