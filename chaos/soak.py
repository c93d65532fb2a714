"""`cronfleet chaos soak --hours H --rate R`: the whole fleet under a steady mix for hours,
with the random nemesis striking every few minutes, every resource sampled, and the
drills' auditor at the end.

The mix (tenant `chaos`, audited): http jobs to the ledger's HTTP target (chaos.httpledger)
spread over the seconds of a 10 s period, so R runs are due every second; the drills'
command jobs (interval, cron each minute, misfire policies, tasks that ignore the key);
one-off bursts at each nemesis peak; poison runs when the nemesis floods. Beside it
(tenant `soak-side`, not audited, since pausing or backfilling an audited job changes
what it owes): queue API traffic (push, lease, ack), job edits, pauses and resumes,
run-now, backfills and cancels, each about once a second.

A soak is a drill (chaos.runner runs it: the same fleet, stack, audit and report) whose
cycles are the nemesis slots; then `soak.md` beside the drill's report says, per
resource, its slope after warm-up with its confidence interval (chaos.trend) and a plot.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from chaos.drill import DrillContext, Timings
from chaos.drills.random_nemesis import RandomNemesis
from chaos.httpledger import LedgerServer
from chaos.sampler import Sampler, read_samples
from chaos.trend import Trend, trend
from chaos.workload import HEALTHY_RETRY, CreatedJob, JobClass, Shape, standard_classes

SIDE_TENANT = "soak-side"
PERIOD_S = 10  # the http jobs' interval: R x PERIOD_S jobs, one tenth due each second
WARMUP_SHARE = 0.2  # of the soak, not judged for trends
CREATE_WITHIN_S = 60  # the http jobs are created before their first fire, this far ahead


@dataclass(frozen=True)
class SoakTimings(Timings):
    """The drills' timings, and the ledger's HTTP target on loopback allowed."""

    def env(self) -> dict[str, str]:
        return super().env() | {"CRONFLEET_HTTP_ALLOW_HOSTS": "127.0.0.1"}


class Soak(RandomNemesis):
    number = 0
    name = "soak"
    title = "soak: the whole fleet for hours under a steady mix, the random nemesis on"
    summary = (
        "steady http, command, cron and one-off runs; side API traffic; faults every few minutes"
    )
    workers = 3
    concurrency = 16  # at the least; a soak's fleet is sized for its rate (below)
    warmup_s = 10.0

    def __init__(self, rate: float, fault_every_s: float, sample_every_s: float) -> None:
        self.rate = rate
        # a slot per run a second on each worker: a slot is held from a run's start until
        # its outcome is written, and 16 each held a 500 runs/s soak to ~120 runs/s with
        # the machine half idle
        self.concurrency = max(Soak.concurrency, math.ceil(rate / self.workers))
        self.fault_every_s = fault_every_s
        self.sample_every_s = sample_every_s
        self.started_ms = 0

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=60)

    def setup(self, ctx: DrillContext) -> None:
        super().setup(ctx)
        ctx.state["ledger_server"] = LedgerServer(ctx.ledger_dir).start()

    def cycle(self, ctx: DrillContext, index: int) -> None:
        if index == 0:
            self._begin(ctx)
        slot_ms = self.started_ms + int((index + 1) * self.fault_every_s * 1000)
        ctx.sleep_until(slot_ms - 7_000)  # the nemesis cycle's peak is ~6 s after it starts
        super().cycle(ctx, index)

    def _begin(self, ctx: DrillContext) -> None:
        """The steady http jobs, the side traffic and the sampler, once the fleet is up."""
        server: LedgerServer = ctx.state["ledger_server"]
        count = max(1, round(self.rate * PERIOD_S))
        created_ms = ctx.now_ms()
        base = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=CREATE_WITHIN_S)
        http = JobClass("http", count, every_s=PERIOD_S, http_url=server.url)
        bodies = []
        for i in range(count):
            body = http.body(ctx.ledger_dir, i, ctx.workload.rng)
            anchor = base + timedelta(seconds=i % PERIOD_S)
            body["schedule"] = {"every_s": PERIOD_S, "anchor": anchor.isoformat()}
            bodies.append(body)
        ids = ctx.workload._create(bodies)
        if ctx.now_ms() >= int(base.timestamp() * 1000):
            raise RuntimeError(f"creating {count} http jobs took over {CREATE_WITHIN_S} s")
        for job_id, body in zip(ids, bodies, strict=True):  # owed from their anchor on
            ctx.workload.jobs[job_id] = CreatedJob(
                job_id, body["name"], "key", "interval", body["schedule"], "run_all",
                int(HEALTHY_RETRY["max_attempts"]), created_ms,
            )  # fmt: skip
        side = SideTraffic(ctx, random.Random(ctx.rng.random()))
        side.start()
        ctx.state["side"] = side
        from kit.transport.progress import QueueProgress

        progress = QueueProgress(ctx.stack.kafka_bootstrap, ctx.group, topic_prefix=ctx.prefix)
        ctx.state["progress"] = progress

        def lag() -> int | None:
            total = 0
            for tier in progress.tiers:
                high, done = progress.high_watermarks(tier), progress.committed(tier)
                total += sum(max(0, h - done.get(p, 0)) for p, h in high.items())
            return total

        sampler = Sampler(ctx.fleet, ctx.stack, ctx.engine, lag, ctx.out, self.sample_every_s)
        sampler.start()
        ctx.state["sampler"] = sampler
        self.started_ms = ctx.now_ms()
        ctx.notes.append(
            f"soak: {count} http jobs every {PERIOD_S} s ({self.rate:g} runs/s) from "
            f"{base.isoformat()}, faults every {self.fault_every_s:g} s"
        )

    def heal_all(self, ctx: DrillContext) -> None:
        side: SideTraffic | None = ctx.state.pop("side", None)
        if side is not None:
            side.stop()
            ctx.notes.append(f"side traffic: {json.dumps(side.counts, sort_keys=True)}")
        super().heal_all(ctx)

    def teardown(self, ctx: DrillContext) -> None:
        sampler: Sampler | None = ctx.state.pop("sampler", None)
        if sampler is not None:
            sampler.stop()
        progress = ctx.state.pop("progress", None)
        if progress is not None:
            progress.close()
        server: LedgerServer | None = ctx.state.pop("ledger_server", None)
        if server is not None:
            server.stop()
        super().teardown(ctx)


class SideTraffic:
    """The API traffic beside the audited workload, on jobs of a tenant of its own: about
    one of each a second, errors counted (the nemesis takes the API's database away)."""

    def __init__(self, ctx: DrillContext, rng: random.Random) -> None:
        from kit.store.tokens import token_create

        token = token_create(ctx.engine, SIDE_TENANT, ("read", "write")).token
        self.api = httpx.Client(
            base_url=str(ctx.api.base_url),
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        self.rng = rng
        self.counts: dict[str, int] = {}
        self.jobs: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="side-traffic", daemon=True)

    def start(self) -> None:
        now = datetime.now(UTC)
        bodies = [
            {"name": f"side-{i}", "schedule": {"every_s": 5}, "task": {"type": "noop"}}
            for i in range(20)
        ]
        answer = self.api.post("/v1/jobs:batch", json={"jobs": bodies})
        answer.raise_for_status()
        self.jobs = list(answer.json()["job_ids"])
        self.created = now
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.api.close()

    def _count(self, what: str, answer: httpx.Response | None) -> Any:
        ok = answer is not None and answer.status_code < 300
        key = f"{what} {'ok' if ok else (answer.status_code if answer else 'no answer')}"
        self.counts[key] = self.counts.get(key, 0) + 1
        return answer.json() if ok and answer is not None and answer.content else None

    def _call(self, what: str, method: str, path: str, **kw: Any) -> Any:
        try:
            answer = self.api.request(method, path, **kw)
        except httpx.HTTPError:
            answer = None
        return self._count(what, answer)

    def _loop(self) -> None:
        actions = (self._queue, self._edit, self._pause, self._run_now_and_cancel, self._backfill)
        while not self._stop.wait(0.2):
            self.rng.choice(actions)()

    def _queue(self) -> None:
        tasks = [{"payload": {"n": i}} for i in range(10)]
        self._call("queue push", "POST", "/v1/queues/soak/tasks:batch", json={"tasks": tasks})
        got = self._call(
            "queue lease", "POST", "/v1/queues/soak/lease",
            json={"worker_id": "soak", "max_tasks": 10, "lease_sec": 30},
        )  # fmt: skip
        if got and got["tasks"]:
            acks = [
                {"task_id": t["task_id"], "lease_token": t["lease_token"]} for t in got["tasks"]
            ]
            self._call("queue ack", "POST", "/v1/tasks:ack", json={"acks": acks})

    def _edit(self) -> None:
        job = self.rng.choice(self.jobs)
        timeout = self.rng.randint(10, 60)
        self._call("edit", "PATCH", f"/v1/jobs/{job}", json={"timeout_s": timeout})

    def _pause(self) -> None:
        job = self.rng.choice(self.jobs)
        self._call("pause", "PATCH", f"/v1/jobs/{job}", json={"paused": True})
        self._call("resume", "PATCH", f"/v1/jobs/{job}", json={"paused": False})

    def _run_now_and_cancel(self) -> None:
        job = self.rng.choice(self.jobs)
        run = self._call("run now", "POST", f"/v1/jobs/{job}/runs")
        if run and self.rng.random() < 0.5:
            self._call("cancel", "POST", f"/v1/runs/{run['run_id']}:cancel")

    def _backfill(self) -> None:
        job = self.rng.choice(self.jobs)
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)
        start = max(self.created, end - timedelta(minutes=2))
        if start >= end:
            return
        body = {"from": start.isoformat(), "to": end.isoformat()}
        self._call("backfill", "POST", f"/v1/jobs/{job}:backfill", json=body)


# -- the report -------------------------------------------------------------------------


def resource_trends(
    samples: list[tuple[float, dict[str, float]]], warmup_share: float = WARMUP_SHARE
) -> dict[str, Trend]:
    """Each resource's trend over the samples after the warm-up."""
    if not samples:
        return {}
    first, last = samples[0][0], samples[-1][0]
    after = first + (last - first) * warmup_share
    series: dict[str, tuple[list[float], list[float]]] = {}
    for t, values in samples:
        if t < after:
            continue
        for name, v in values.items():
            ts, vs = series.setdefault(name, ([], []))
            ts.append(t)
            vs.append(float(v))
    out = {}
    for name, (ts, vs) in sorted(series.items()):
        found = trend(ts, vs)
        if found is not None:
            out[name] = found
    return out


UNITS = {"rss_mb": "MB", "anon_mb": "MB", "fds": "fds", "threads": "threads", "cpu": "cores"}
# Grows with the run history the database keeps (a day's partition at a time, for
# `run_retention_s`: kit.core.retention), so not flat in hours by design: its slope is
# reported, and what a run costs (`bytes_per_run`, the dead tuples) is what is judged.
GROWS_WITH_HISTORY = frozenset({"db_size_mb"})


def write_soak_report(
    out: Path, audit: dict[str, Any] | None, hours: float, rate: float, command: str
) -> dict[str, Any]:
    """soak.md, soak.json and a plot per resource under `out`; the summary written."""
    samples = read_samples(out / "samples.jsonl")
    trends = resource_trends(samples)
    plots = _plots(out, samples, trends)
    summary: dict[str, Any] = {
        "command": command,
        "hours": hours,
        "rate_asked": rate,
        "samples": len(samples),
        "audit": None if audit is None else {k: audit[k] for k in _AUDIT_KEYS if k in audit},
        "trends": {
            name: {
                "mean": round(t.mean, 3),
                "slope_per_h": round(t.slope_per_h, 4),
                "ci95_per_h": [round(t.ci_low_per_h, 4), round(t.ci_high_per_h, 4)],
                "growth_pct": None if t.growth_pct is None else round(t.growth_pct, 2),
                "n": t.n,
                "n_effective": t.n_effective,
                "flat": t.flat,
            }
            for name, t in trends.items()
        },
    }
    not_flat = sorted(n for n, t in trends.items() if not t.flat and n not in GROWS_WITH_HISTORY)
    summary["not_flat"] = not_flat
    (out / "soak.json").write_text(json.dumps(summary, indent=1, default=str))
    lines = [
        "# Soak",
        "",
        f"`{command}`",
        "",
        f"{len(samples)} samples; trends over the last {100 - WARMUP_SHARE * 100:.0f} % "
        "(after warm-up): least-squares slope per hour, 95 % interval with the residuals' "
        "AR(1) effective sample size (chaos.trend); flat: the interval holds 0, or its far "
        "end grows the resource by under 5 % of its level over the soak.",
        "",
    ]
    if audit:
        lines += [
            "| audit | |",
            "| --- | --- |",
            *[f"| {k} | {audit.get(k)} |" for k in _AUDIT_KEYS if k in audit],
            "",
        ]
    lines += [
        "| resource | mean | slope / h | 95 % interval / h | growth over the soak | flat |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, t in trends.items():
        growth = "" if t.growth_pct is None else f"{t.growth_pct:+.2f} %"
        lines.append(
            f"| {name} | {t.mean:.3g} | {t.slope_per_h:+.3g} | "
            f"[{t.ci_low_per_h:+.3g}, {t.ci_high_per_h:+.3g}] | {growth} | "
            f"{_flat_cell(name, t)} |"
        )
    lines += ["", *[f"![{p}]({p})" for p in plots], ""]
    (out / "soak.md").write_text("\n".join(lines))
    return summary


def _flat_cell(name: str, t: Trend) -> str:
    if name in GROWS_WITH_HISTORY:
        return "grows with the history kept (judged: bytes_per_run)"
    return "yes" if t.flat else "**no**"


_AUDIT_KEYS = (
    "passed",
    "expected",
    "expected_poison",
    "effects",
    "lost",
    "duplicate_effects",
    "stale_writes_accepted",
    "overlapping_executions",
    "duplicate_deliveries",
    "faults",
    "recover_s_median",
    "recover_s_max",
    "lag_before",
    "lag_during",
    "lag_after",
)


def _plots(
    out: Path, samples: list[tuple[float, dict[str, float]]], trends: dict[str, Trend]
) -> list[str]:
    """One small plot per kind of resource (every process's series in it), the fits drawn."""
    if not samples:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = samples[0][0]
    kinds: dict[str, list[str]] = {}
    for name in trends:
        kinds.setdefault(name.split(":", 1)[0], []).append(name)
    written = []
    for kind, names in sorted(kinds.items()):
        fig, ax = plt.subplots(figsize=(6, 2.6), dpi=80)
        for name in names:
            pts = [((t - t0) / 3600, v[name]) for t, v in samples if name in v]
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            label = name.split(":", 1)[1] if ":" in name else name
            line = ax.plot(xs, ys, lw=0.8, label=label)[0]
            fit = trends[name]
            mid = sum(xs) / len(xs)
            ax.plot(
                [xs[0], xs[-1]],
                [
                    fit.mean + fit.slope_per_h * (xs[0] - mid),
                    fit.mean + fit.slope_per_h * (xs[-1] - mid),
                ],
                lw=1.2,
                ls="--",
                color=line.get_color(),
            )
        ax.set_title(kind, fontsize=9)
        ax.set_xlabel("hours", fontsize=8)
        ax.tick_params(labelsize=7)
        if len(names) > 1:
            ax.legend(fontsize=6, ncol=4)
        fig.tight_layout()
        path = f"soak-{kind}.png"
        fig.savefig(out / path)
        plt.close(fig)
        written.append(path)
    return written


def run_soak(
    hours: float,
    rate: float,
    seed: int,
    out: Path,
    stack: Any,
    fault_every_s: float = 180.0,
    sample_every_s: float = 10.0,
    command: str = "",
) -> tuple[Any, dict[str, Any]]:
    """Run the soak as a drill of `hours / fault_every_s` nemesis cycles; its report."""
    from chaos.runner import RunOptions, run_drill

    cycles = max(1, int(hours * 3600 // fault_every_s))
    soak = Soak(rate, fault_every_s, sample_every_s)
    opts = RunOptions(cycles, seed, out, timings=SoakTimings(), model=False)
    result = run_drill(soak, stack, opts, command)
    audit = result.audit.summary() if result.audit else None
    with contextlib.suppress(Exception):
        if result.audit is not None:
            audit = audit or {}
            audit["overlapping_executions"] = len(result.audit.overlapping)
    summary = write_soak_report(result.out, audit, hours, rate, command)
    summary["passed"] = result.passed
    summary["error"] = result.error
    summary["wall_s"] = round(result.wall_s, 1)
    if result.audit is not None and result.history is not None:
        span_s = max(1.0, (result.history.end_ms - soak.started_ms) / 1000)
        summary["runs_per_s"] = round(result.audit.runs / span_s, 1)
    (result.out / "soak.json").write_text(json.dumps(summary, indent=1, default=str))
    return result, summary
