"""Every script of benchmarks/ run as a user runs it (`python benchmarks/NAME.py ...` from
the repository's root) at a small size on the local stack, its output written under
tmp_path, and what it produced checked: the keys, counts equal to what was asked, no
errors, its plot. Never how fast: the figures are the benchmarks' own, at full size, on a
quiet machine (benchmarks/results/README.md names the page each backs). A store or
model change that breaks a benchmark fails here, not at the next sitting.

`test_every_benchmark_has_a_test` holds that each file of benchmarks/ is run here."""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.conftest import REPO, scratch_name

BENCH = REPO / "benchmarks"
STACK = (pytest.mark.integration, pytest.mark.slow)
QUEUE_ONE = "queue, one call per task"
QUEUE_BATCHED = "queue, batched (100 per call)"
JOBS_MIX = "jobs mix"
# the jobs mix is measured once its 40 users have made their jobs: on a loaded machine that
# setup alone took 5 s, and a run shorter than its setup writes no summary
JOBS_MIX_S = "8"


def stack(test: Callable[..., None]) -> Callable[..., None]:
    """The local stack's tests: integration and slow (pyproject's markers)."""
    for mark in STACK:
        test = mark(test)
    return test


def run(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300,
    stderr: Path | None = None,
) -> str:
    """`argv` from the repository's root, this tree first on the path; its stdout (its
    stderr into the file `stderr` when given). A non-zero exit fails with the output's
    tail; past the bound its process group is killed (a benchmark's services with it)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    with contextlib.ExitStack() as files:
        proc = subprocess.Popen(
            list(argv),
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": path, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=files.enter_context(stderr.open("w")) if stderr else subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"{shlex.join(argv)}: still running after {timeout_s} s\n{out[-3000:]}")
    err = stderr.read_text() if stderr else err
    assert proc.returncode == 0, (
        f"{shlex.join(argv)} exited {proc.returncode}\n{out[-4000:]}\n{err[-4000:]}"
    )
    return out


def bench(script: str, *args: str, env: Mapping[str, str] | None = None, **kw: Any) -> str:
    return run([sys.executable, f"benchmarks/{script}", *args], env, **kw)


def read(path: Path) -> Any:
    assert path.exists(), f"{path} not written"
    return json.loads(path.read_text())


def plotted(path: Path) -> None:
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no plot {path}"


# -- the storm sitting: burst_at_t, life_of_a_run and the calibration, then the model --------

SITTING_JOBS = 2000  # enough for a p99 start lag over 0 ms, the model's error a ratio to it


@pytest.fixture(scope="module")
def sitting(
    tmp_path_factory: pytest.TempPathFactory, admin_url: str, python_on_path: dict[str, str]
) -> Path:
    """`bash benchmarks/storm_series.sh OUT 1 1` at 2,000 runs: one burst sampled thread by
    thread (burst_at_t.py, as a calibration samples it), one compared burst
    (life_of_a_run.py), the profile calibrated from the sampled one. Every Python process
    of it traces its cyclic GC (benchmarks/gc_trace) into OUT/gct."""
    out = tmp_path_factory.mktemp("sitting")
    trace = f"{REPO}{os.pathsep}{BENCH / 'gc_trace'}"
    env = {**python_on_path, "PYTHONPATH": trace, "GCTRACE_DIR": str(out / "gct")}
    # T = now + 18 s: the sampler names the threads at T - 13 s, samples from T - 11 s
    extra = ("--jobs", str(SITTING_JOBS), "--lead-s", "18")
    run(["bash", "benchmarks/storm_series.sh", str(out), "1", "1", *extra], env, timeout_s=600)
    return out


def burst_complete(r: dict[str, Any], jobs: int) -> None:
    assert (r["jobs"], r["fired"], r["succeeded"]) == (jobs,) * 3
    assert r["messages"] == jobs + 1  # and the warm-up run's
    assert (r["dropped"], r["executed_twice"], r["published_twice"]) == (0, 0, 0)
    assert set(r["cpu_by_phase_s"]) == {"idle", "ahead", "after"}
    assert sum(w["runs"] for w in r["runs_by_worker"].values()) == jobs
    assert set(r["kit_imported"].values()) == {"this tree"}  # this tree's kit


@stack
def test_storm_series_sitting(sitting: Path) -> None:
    """storm_series.sh: burst_at_t.py's sampled burst, life_of_a_run.py's compared burst
    (every run fired once and succeeded), and the profile calibrated from the sample."""
    sampled = read(sitting / "calibration1" / "burst-1node.json")
    burst_complete(sampled, SITTING_JOBS)
    assert sampled["workers"] == 2
    at_t = read(sitting / "calibration1" / "all_at_t.json")
    # sampled from the scan-ahead's start to past T ("ahead", "after"), each hold thread named
    assert {"ahead", "after", "T..T+0.3"} <= set(at_t["windows"])
    assert {"worker-1 hold", "worker-2 hold"} <= set(at_t["by_category_ms"])
    compared = read(sitting / "run1" / "burst-1node.json")
    burst_complete(compared, SITTING_JOBS)
    plotted(sitting / "run1" / "burst-1node.png")
    profile = tomllib.loads((sitting / "profile.toml").read_text())
    default = tomllib.loads((REPO / "sim" / "profiles" / "default.toml").read_text())
    storm_keys = {k for k in default["service_times"] if k.startswith("storm_")}
    assert storm_keys <= set(profile["service_times"])
    assert all(profile["service_times"][k] >= 0 for k in storm_keys)
    assert f"{sitting}/calibration1/burst-1node.json" in profile["measured"]["storm_cpu"]


@stack
def test_storm_model_and_sittings(sitting: Path, tmp_path: Path) -> None:
    """storm_model.py compares the sitting's bursts with the model on its own profile;
    storm_sittings.py sets that sitting, and the kept ones, side by side."""
    runs = [sitting / "calibration1" / "burst-1node.json", sitting / "run1" / "burst-1node.json"]
    compared = tmp_path / "d1" / "sitting1"
    compared.mkdir(parents=True)
    bench(
        "storm_model.py",
        *("--seeds", "1", "--measured", *map(str, runs)),
        *("--profile", str(sitting / "profile.toml")),
        *("--json", str(compared / "model_vs_kit.json"), "--plot", str(tmp_path / "model.png")),
    )
    result = read(compared / "model_vs_kit.json")
    assert [r["seed"] for r in result["predicted"]] == [1]
    assert [r["file"] for r in result["compared"]] == [str(r) for r in runs]
    for row, path in zip(result["compared"], runs, strict=True):
        assert row["measured_p99_s"] == read(path)["start_lag_s"][1]
    plotted(tmp_path / "model.png")

    table = bench("storm_sittings.py", str(compared), "--plot", str(tmp_path / "one.png"))
    (row,) = [line for line in table.splitlines()[1:] if line.strip() and "plot:" not in line]
    assert row.split()[1] == "2"  # its two compared runs
    plotted(tmp_path / "one.png")
    kept = sorted(BENCH.glob("results/storm_2core/*/sitting*/model_vs_kit.json"))
    table = bench("storm_sittings.py", "--plot", str(tmp_path / "kept.png"))
    assert len([x for x in table.splitlines()[1:] if x.strip() and "plot:" not in x]) == len(kept)
    plotted(tmp_path / "kept.png")


def test_storm_model_refuses_a_measured_p99_of_zero(tmp_path: Path) -> None:
    """A burst whose starts all fell in its second's first millisecond (a few hundred
    runs) gives no error ratio: storm_model.py says so instead of dividing by zero."""
    measured = tmp_path / "burst-1node.json"
    measured.write_text(json.dumps({"jobs": 200, "workers": 2, "start_lag_s": [0.0, 0.0, 0.0]}))
    argv = [sys.executable, "benchmarks/storm_model.py", "--seeds", "1", "--measured"]
    p = subprocess.run([*argv, str(measured)], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"measured p99 start lag 0 s in {measured}: nothing to compare with" in p.stdout


@stack
def test_gc_pauses(sitting: Path) -> None:
    """gc_pauses.py reads what benchmarks/gc_trace recorded of every process of the
    sitting: one line per traced process, its collections around the compared burst's T."""
    traces = sorted((sitting / "gct").glob("*.txt"))
    assert traces, "benchmarks/gc_trace recorded no collection over 1 ms"
    log = (sitting / "run1.log").read_text()
    t = re.search(r"due (\S+ \S+) \(", log)
    assert t is not None, log[-2000:]
    at = t.group(1).replace(" ", "T")
    around = ("--before", "900", "--after", "900")
    out = bench("gc_pauses.py", str(sitting / "gct"), "--at", at, *around)
    counts = re.findall(r": (\d+) collections > 1 ms, ", out)
    assert len(counts) == len(traces) and all(int(n) >= 1 for n in counts), out[-2000:]


@stack
def test_life_of_a_run_series(sitting: Path, tmp_path: Path) -> None:
    """life_of_a_run_series.py: the sitting's two bursts as a baseline and a candidate."""
    shutil.copy(sitting / "run1" / "burst-1node.json", tmp_path / "burst-base-1.json")
    shutil.copy(sitting / "calibration1" / "burst-1node.json", tmp_path / "burst-new-1.json")
    out = bench("life_of_a_run_series.py", str(tmp_path), "burst")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| base")]
    rows += [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| cand")]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [("baseline", "1"), ("candidate", "1")]
    for r in rows:
        assert (r[3].strip(), r[4].strip(), r[5].strip()) == (f"{SITTING_JOBS:,}", "0", "0")
    plotted(tmp_path / "burst-series.png")
    named = bench("life_of_a_run_series.py", str(tmp_path), "burst", "--labels", "one", "two")
    assert [line.split("|")[1].strip() for line in named.splitlines() if line[:3] == "| o"] == [
        "one"
    ]
    assert "| two | 1 |" in named


# -- the services on the stack -----------------------------------------------------------


@stack
def test_life_of_a_run_sustain(admin_url: str, tmp_path: Path) -> None:
    """life_of_a_run.py --mode sustain: every second's runs fired once and succeeded."""
    rate, seconds = 20, 4
    bench(
        "life_of_a_run.py",
        *("--mode", "sustain", "--rate", str(rate), "--sustain-s", str(seconds)),
        *("--workers", "1", "--max-wait-s", "120", "--out", str(tmp_path)),
    )
    r = read(tmp_path / f"sustain-{rate}per_s-1node.json")
    expected = rate * seconds
    assert (r["expected_runs"], r["runs"], r["succeeded"]) == (expected,) * 3
    assert (r["executed_twice"], r["not_finished_after_drain"]) == (0, 0)
    assert sum(row[1] for row in r["per_10s"]) == expected
    plotted(tmp_path / f"sustain-{rate}per_s-1node.png")


@stack
def test_http_tasks_burst(admin_url: str, ledger: Path, tmp_path: Path) -> None:
    """http_tasks.py: every http task's request reached the Go ledger once; with
    --trace-starts its worker ran benchmarks/start_trace, and start_phases.py reads
    where each run's start lag went (released, then on the loop, then begun)."""
    jobs = 40
    out, trace = tmp_path / "out", tmp_path / "trace"
    bench(
        "http_tasks.py",
        *("burst", "--jobs", str(jobs), "--lead-s", "14", "--workers", "1"),
        *("--concurrency", "64", "--max-wait-s", "120", "--out", str(out)),
        *("--trace-starts", str(trace)),
    )
    (summary,) = read(out / "summary.json")
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    r = read(run_dir / f"{run_dir.name}.json")
    assert (summary["phase"], summary["runs"]) == (r["phase"], r["runs"])
    assert (r["expected"], r["runs"], r["arrived"], r["requests"]) == (jobs,) * 4
    assert r["statuses"] == {"succeeded": jobs}
    assert (r["dropped"], r["arrived_twice"], r["unexpected_keys"]) == (0, 0, 0)
    assert (r["attempt_2_or_more"], r["not_done_after_wait"]) == (0, 0)
    assert sum(row[1] for row in r["by_second"]) == jobs
    plotted(run_dir / f"{run_dir.name}.png")
    (worker_trace,) = (trace / run_dir.name).glob("*.tsv")  # the one worker's
    rows = [[float(c or "nan") for c in line.split("\t")]
            for line in worker_trace.read_text().splitlines()]  # fmt: skip
    assert len(rows) >= jobs  # and the warm-up's
    for _, *phases in rows:  # in order; nan where a run did not pass (started off the loop)
        passed = [at for at in phases if at == at]
        # released by the database clock's estimate, stamped by the wall clock: one host
        assert passed[0] > -0.05 and passed == sorted(passed) and passed[-1] == phases[-1]
    report = bench(
        "start_phases.py", str(trace / run_dir.name), "--skip-s", "0", "--window-s", "600",
        "--json", str(tmp_path / "phases.json"),
    )  # fmt: skip
    got = read(tmp_path / "phases.json")
    assert got["runs"] == len(rows) and got["workers"] == 1
    order = ["released", "on_loop", "first_step", "connected", "began"]  # all on the loop
    assert [got[p]["p50"] for p in order] == sorted(got[p]["p50"] for p in order)
    assert "one worker's second" in report


@stack
def test_cancel_latency(admin_url: str, tmp_path: Path) -> None:
    """cancel_latency.py: each cancelled command's worker was told and its process gone,
    through the notification and through the heartbeat (a 3 s lease: a beat each second)."""
    bench(
        "cancel_latency.py",
        *("--runs", "2", "--series", "1", "--baseline-runs", "1", "--out", str(tmp_path)),
        env={"CRONFLEET_RUN_LEASE_TTL_MS": "3000"},
        timeout_s=240,
    )
    r = read(tmp_path / "cancel_latency.json")
    assert [len(s) for s in r["series"]] == [2] and len(r["baseline_ms"]) == 1
    values = [v for s in r["series"] for pair in s for v in pair] + r["baseline_ms"]
    assert all(math.isfinite(v) and v >= 0 for v in values), values
    plotted(tmp_path / "cancel_latency.png")


@stack
def test_preempt_lag(admin_url: str, tmp_path: Path) -> None:
    """preempt_lag.py: each paid run on a worker full of free runs started (a lag
    written) and preempted one free run, which ran again at attempt 1. It runs
    one_worker.py's scratch stack (as cancel_latency.py does)."""
    bench(
        "preempt_lag.py",
        *("--slots", "2", "--paid", "2", "--free-s", "20", "--out", str(tmp_path)),
        timeout_s=240,
    )
    r = read(tmp_path / "preempt_lag.json")
    assert len(r["lags_ms"]) == 2 and all(math.isfinite(v) for v in r["lags_ms"]), r
    assert r["preempted"] == 2 and r["max_free_attempt"] == 1, r


# -- the store's statements on scratch databases -------------------------------------------


@stack
def test_jobs_list(admin_url: str, tmp_path: Path) -> None:
    """jobs_list.py: each filter finds the same jobs with and without its index."""
    jobs = 2000
    small = ("--jobs", str(jobs), "--rounds", "1", "--reps", "1")
    bench("jobs_list.py", *small, "--out", str(tmp_path))
    r = read(tmp_path / "jobs_list.json")
    ((with_index,), (without,)) = r["with"], r["without"]
    assert set(with_index) == set(without) and len(with_index) == 9
    assert with_index["all (first page)"][2] == jobs
    for query, figures in with_index.items():
        assert figures[2] == without[query][2], query
        assert 0 <= figures[2] <= jobs
    plotted(tmp_path / "jobs_list.png")


@stack
def test_run_history_and_its_plans(kept_database: str, tmp_path: Path) -> None:
    """run_history.py (through scratch_db.py) at a 2-day retention, so days are dropped
    and their live runs kept; run_history_plans.py on the database it kept (its third
    partition then a whole day)."""
    days, per_day = 5, 1892  # the fewest runs a day it takes
    bench(
        "run_history.py",
        *("--days", str(days), "--runs-per-day", str(per_day), "--jobs", "20"),
        *("--insert-batch", "1000", "--retention-days", "2"),
        *("--db-name", kept_database, "--keep", "--json", str(tmp_path / "h.json")),
        *("--plot", str(tmp_path / "h.png"), "--explain", str(tmp_path / "explain.txt")),
    )
    r = read(tmp_path / "h.json")
    assert [d["day"] for d in r["days"]] == list(range(days))
    for d in r["days"]:
        assert (d["reaped"], d["published"], d["due_rows"]) == (64, 64, 20)
        assert len(d["claim_finish_ms"]) == 5 and len(d["lookup_ms"]) == 20
    first = r["days"][0]["date"].replace("-", "")[4:]
    dropping = [d for d in r["days"] if first in d["dropped"]]
    assert len(dropping) == 1 and dropping[0]["kept"] == 25  # its retried and dead runs
    assert r["storage"]["rows"] == per_day
    assert "==== last day" in (tmp_path / "explain.txt").read_text()
    plotted(tmp_path / "h.png")

    out = bench("run_history_plans.py", kept_database)
    assert re.search(r"^partitions of runs: \d+; 64 runs of runs_\d{8}$", out, re.M), out[:500]
    sections = re.findall(r"^=== (\w+), (\w+)$", out, re.M)
    assert sections == [
        (statement, mode)
        for statement in ("runs_claim", "runs_finish_ok")
        for mode in ("force_custom_plan", "force_generic_plan", "jit_off")
    ]


@stack
def test_trigger_index(admin_url: str, tmp_path: Path) -> None:
    """trigger_index.py (through scratch_db.py and scan_clock.py, which publishes what
    each scan commits) below its quick check: two sizes, one short series each; every
    scan wrote runs, the spike's too, and each series has its CPU per fire."""
    name = scratch_name("scan")
    bench(
        "trigger_index.py",
        *("--sizes", "1e3,2e3", "--series", "1", "--series-s", "3", "--spike", "200"),
        *("--db-name", name, "--json", str(tmp_path / "t.json"), "--out", str(tmp_path)),
    )
    r = read(tmp_path / "t.json")
    assert [s["size"] for s in r["sizes"]] == [1000, 2000]
    assert [(s["size"], s["series"]) for s in r["series"]] == [(1000, 1), (2000, 1)]
    for s in r["series"]:
        assert s["scans"] >= 1 and s["runs_per_scan"] > 0 and s["spike_rows"] > 0, s
        assert s["sql_ms_mean"]["triggers_due"] > 0
        assert s["spike_cpu_us_per_fire"] > 0 and s["spike_db_cpu_us_per_fire"] >= 0, s
        assert s["spike_runs"] > 0, s  # published (a 3 s series ends before its held third)
    assert {x["size"] for x in r["scans"]} == {1000, 2000} and r["verdict"]
    plotted(tmp_path / "trigger_index.png")
    # docs' plot is drawn from runs' JSON alone (no database): this run's and a kept one
    kept = sorted((REPO / "benchmarks/results/trigger_index").glob("*-after-*.json"))[:1]
    again = tmp_path / "again"
    bench("trigger_index.py", "--plot", str(tmp_path / "t.json"), *map(str, kept),
          "--out", str(again))  # fmt: skip
    plotted(again / "trigger_index.png")


@stack
def test_paused_scan(admin_url: str, tmp_path: Path) -> None:
    """paused_scan.py: a minute of fires of paused every-minute jobs writes no run, and
    each trigger is read once (parked at its first fire)."""
    bench(
        "paused_scan.py",
        *("--jobs", "300", "--minutes", "1", "--db-name", scratch_name("paused")),
        *("--json", str(tmp_path / "p.json")),
    )
    r = read(tmp_path / "p.json")
    assert r["jobs"] == 300 and r["scans"] >= 60, r
    assert r["runs_rows"] == 0 and r["runs_inserted"] == 0, r
    assert r["triggers_read"] == 300, r


@stack
def test_scan_gap(admin_url: str) -> None:
    """scan_gap.py: one scan on a fresh node fires every due cron job of varied shapes."""
    out = bench("scan_gap.py", "--jobs", "300")
    assert re.search(r"^scan [\d.]+ s: fired 300 of 300 read$", out, re.M), out
    assert len(re.findall(r"^  idle [\d.]+ s between ", out, re.M)) == 3


@stack
def test_pg_async_modes(admin_url: str) -> None:
    """pg_async_modes.py: both drivers' enqueue, lease and ack cycles, every call made."""
    out = bench("pg_async_modes.py", "--calls", "60", "--concurrency", "2", "--rounds", "1")
    modes = re.findall(r"^(pipelined|plain)\s*: (\d+) calls, ", out, re.M)
    assert modes == [("pipelined", "60"), ("plain", "60")], out
    assert len(re.findall(r"^    (enqueue|lease|ack) +p50 ", out, re.M)) == 6


# -- the HTTP API under the Locust suites ----------------------------------------------------


@stack
def test_api_speed_series_and_report(api_env: dict[str, str], tmp_path: Path) -> None:
    """api_speed.py: one mix against the baseline (this commit, from `git archive`) and
    this tree, every task acked once; then its table and plot from the JSON."""
    series = tmp_path / "api_speed.json"
    bench(
        "api_speed.py",
        *("--json", str(series), "--processes", "1", "--baseline-ref", "HEAD"),
        *("--duration", "2", "--mix", QUEUE_BATCHED),
        env=api_env,
    )
    rows = read(series)
    assert [(r["code"], r["processes"], r["mix"]) for r in rows] == [
        ("baseline", 1, QUEUE_BATCHED),
        ("now", 1, QUEUE_BATCHED),
    ]
    for r in rows:
        assert r["series"] == 1 and r["errors"] == 0, r
        assert r["enqueued"] > 0 and r["acked_once"] == r["enqueued"], r
        assert (r["lost"], r["acked_twice"], r["stats_consistent"]) == (0, 0, True), r
    plot = tmp_path / "p.png"
    out = bench("api_speed.py", "--report", "--json", str(series), "--plot", str(plot))
    assert len([line for line in out.splitlines() if line.startswith(f"| {QUEUE_BATCHED} |")]) == 2
    plotted(plot)


@stack
def test_api_rate_series_and_report(api_env: dict[str, str], tmp_path: Path) -> None:
    """api_rate.py: one round of its three arms; A within its limit meets only 200s, A
    over it meets 429s, B no error in any arm; then the table from the JSON."""
    series = tmp_path / "api_rate.json"
    bench(
        "api_rate.py",
        *("--rounds", "1", "--run-time", "4", "--json", str(series)),
        env=api_env,
    )
    rows = read(series)
    assert [r["arm"] for r in rows] == ["alone", "a_within", "a_over"]
    by_arm = {r["arm"]: r for r in rows}
    assert all(r["b_errors"] == 0 and r["b_requests"] > 0 for r in rows), rows
    assert by_arm["alone"]["a_statuses"] == {}
    assert set(by_arm["a_within"]["a_statuses"]) == {"200"}, by_arm["a_within"]
    assert by_arm["a_over"]["a_statuses"].get("429", 0) > 0, by_arm["a_over"]
    plot = tmp_path / "p.png"
    out = bench("api_rate.py", "--report", "--json", str(series), "--plot", str(plot))
    assert len([line for line in out.splitlines() if line.startswith("| 1 |")]) == 3
    assert "B p99 over/within" in out
    plotted(plot)
    mixed = tmp_path / "interleaved.json"
    out = bench(
        "api_rate.py",
        *("--interleaved", "1", "--slot-s", "6", "--lead-s", "8", "--json", str(mixed)),
        env=api_env,
    )
    slots = read(mixed)
    assert sorted(r["arm"] for r in slots) == sorted(["alone", "a_within", "a_over"])
    for r in slots:
        assert r["b_errors"] == 0 and r["b_requests"] == len(r["b_ms"]) > 0, r
        if r["arm"] == "alone":
            assert r["a_statuses"] == {}, r
        else:  # within its limit A is served (a slot after one over it may begin with 429s)
            assert r["a_statuses"].get("200", 0) > 0, r
        if r["arm"] == "a_over":
            assert r["a_statuses"].get("429", 0) > 0, r
    assert "a_over/alone: " in out and "95 % interval" in out
    cpu = tmp_path / "cpu.json"
    bench("api_rate.py", "--cpu-per-call", "40", "--json", str(cpu), env=api_env)
    calls = read(cpu)
    assert [(r["round"], r["calls"]) for r in calls] == [
        (n, kind) for n in (1, 2, 3) for kind in ("served", "refused")
    ]
    for r in calls:
        assert sum(r["answers"].values()) == 40 and r["api_cpu_us_per_call"] >= 0, r
        assert r["answers"].get("429", 0) >= (39 if r["calls"] == "refused" else 0), r
        assert r["calls"] == "refused" or r["answers"] == {"200": 40}, r


@stack
def test_api_profile(api_env: dict[str, str], tmp_path: Path) -> None:
    """api_profile.py: py-spy attached to the API under the one-call queue mix (its fixed
    window may close before a short load's users have started: the samples are not
    counted), every layer in the table, and the commit latency beside it."""
    bench(
        "api_profile.py",
        *("--duration", "2", "--mix", QUEUE_ONE),
        *("--out", str(tmp_path / "profile.md"), "--raw", str(tmp_path / "raw.txt")),
        env=api_env,
    )
    text = (tmp_path / "profile.md").read_text()
    assert f"python benchmarks/api_profile.py --mix '{QUEUE_ONE}'" in text
    assert re.search(r"^[\d,]+ samples of the thread holding the GIL", text, re.M), text[:500]
    stacks = (tmp_path / "raw.txt").read_text().splitlines()  # py-spy's, copied by --raw
    assert all(line.rsplit(" ", 1)[-1].isdigit() for line in stacks), stacks[:3]
    for layer in ("HTTP server", "framework", "driver", "kit code", "other"):
        assert re.search(rf"^\| {layer}", text, re.M), layer
    assert re.search(r"^\| synchronous_commit = (on|off) \| [\d.]+ \| [\d.]+ \|$", text, re.M)


@stack
def test_api_stalls(api_env: dict[str, str]) -> None:
    """api_stalls.py: the jobs mix with PostgreSQL's waits sampled, the fdatasync probe
    before and during it, and the page cache's writeback."""
    probes = ("--fsync-probe", "--writeback")
    out = bench("api_stalls.py", "--mix", JOBS_MIX, "--duration", JOBS_MIX_S, *probes, env=api_env)
    assert re.search(rf"^{JOBS_MIX}: [\d,]+ calls/s, p50 \d+ ms", out, re.M), out[:800]
    calls = [int(n) for n in re.findall(r"^    .+: (\d+) calls, p50 ", out, re.M)]
    assert calls and sum(calls) > 0, out[:800]  # each route's, the API answered
    assert re.search(r"^active backends sampled every 10 ms \([\d,]+ samples\)", out, re.M)
    for label in ("before the mix", "during the mix"):
        assert re.search(rf"^fdatasync of 8 KiB in /tmp {label}: [\d,]+, p50", out, re.M), label
    assert re.search(r"^page cache every 10 ms \([\d,]+ samples\)", out, re.M)


@stack
def test_api_wal(api_env: dict[str, str], tmp_path: Path) -> None:
    """api_wal.py: one round of both arms, each run's WAL counted; the server's settings
    are what they were when it is done."""
    import psycopg

    from kit.store.pg_async import conninfo_of

    def wal_settings() -> list[tuple[str, str]]:
        with psycopg.connect(conninfo_of(api_env["CRONFLEET_DATABASE_URL"])) as conn:
            sql = "SELECT name, setting FROM pg_settings WHERE name IN (%s, %s) ORDER BY 1"
            return conn.execute(sql, ("wal_compression", "track_wal_io_timing")).fetchall()

    before = wal_settings()
    bench(
        "api_wal.py",
        *("--rounds", "1", "--processes", "1", "--duration", JOBS_MIX_S),
        *("--json", str(tmp_path / "wal.json")),
        env=api_env,
    )
    rows = read(tmp_path / "wal.json")
    assert [(r["round"], r["processes"], r["arm"]) for r in rows] == [
        (1, 1, "stack as it is"),
        (1, 1, "wal_compression=lz4"),
    ]
    # no calls/s asked (see JOBS_MIX_S); the setup's writes are in the run's WAL all the same
    for r in rows:
        assert r["errors"] == 0 and r["wal_kib_per_call"] > 0 and r["wal_syncs"] > 0, r
    deadline = time.monotonic() + 10  # the server reloads its settings as it gets to it
    while wal_settings() != before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert wal_settings() == before


# -- the model and the kept series ------------------------------------------------------------


@pytest.mark.slow
def test_sim_day_and_its_plot(tmp_path: Path) -> None:
    """sim_day.py on an hour of the day scenario at 2,000 schedules (its progress lines on
    stderr, its figures as JSON); sim_day_plot.py draws the progress."""
    schedules, seconds = 2000, 3660
    figures, log = tmp_path / "day.json", tmp_path / "day.log"
    sets = ("--set", f"workload.schedules={schedules}", "--set", f"duration_s={seconds}")
    bench("sim_day.py", "--json", str(figures), *sets, stderr=log)
    r = read(figures)
    assert abs(r["jobs"] - schedules) <= 0.01 * schedules  # shares rounded to whole jobs
    assert r["simulated_s"] >= seconds and r["runs"] > 0 and r["events"] > 0
    assert (r["dropped"], r["duplicated"], r["in_flight_at_end"]) == (0, 0, 0)
    assert r["command"].endswith(f"--set workload.schedules={schedules} --set duration_s={seconds}")
    progress = [line for line in log.read_text().splitlines() if line.lstrip().startswith("sim ")]
    assert len(progress) >= 3, log.read_text()[-2000:]
    out = bench("sim_day_plot.py", str(tmp_path / "day.png"), str(log))
    assert f"wrote {tmp_path / 'day.png'}" in out
    plotted(tmp_path / "day.png")


@pytest.mark.slow
def test_sim_top_of_hour() -> None:
    """sim_top_of_hour.py on a small top of the hour (tests/sim's SMALL_PEAK)."""
    sets = (
        "duration_s=80", "peak_at_s=20", "fleet.nodes=1", "workload.schedules=100000",
        "workload.runs_per_s=50", "workload.peak_runs_per_s=5000",
    )  # fmt: skip
    out = bench("sim_top_of_hour.py", *(a for s in sets for a in ("--set", s)))
    assert re.search(r"^simulated: +120\.0 s \(80 s of workload \+ drain\), [\d,]+ runs", out, re.M)
    assert re.search(r"^p99 start lag: +[\d.]+ s, dropped 0, duplicated 0$", out, re.M), out
    assert re.search(r"^events: +[\d,]+ \([\d,]+ SimPy \+ [\d,]+ per-run\)$", out, re.M)


def test_loadtest_report_reads_the_kept_series(tmp_path: Path) -> None:
    """loadtest_report.py on the kept summaries (benchmarks/results/loadtest, as
    scripts/loadtest_full.sh lays them out): a row each, each copied, the storms' plot."""
    kept = sorted(BENCH.glob("results/loadtest/*/*.json"))
    assert kept
    out_dir = tmp_path / "out"
    for path in kept:
        (out_dir / path.stem).mkdir(parents=True)
        shutil.copy(path, out_dir / path.stem / "summary.json")
    docs = tmp_path / "docs"
    out = bench("loadtest_report.py", str(out_dir), "--docs", str(docs))
    rows = [line.split("|")[1].strip() for line in out.splitlines()[2:] if line.startswith("| ")]
    assert sorted(rows) == sorted(p.stem for p in kept)
    for path in kept:
        assert read(docs / f"{path.stem}.json") == read(path)
    plotted(docs / "storms.png")


def test_skewed_threads(tmp_path: Path) -> None:
    """skewed_threads.py at one short round: each of its three arms ran once, did work on
    CPU, and the medians came out through series_report.py with the rows written."""
    out = bench("skewed_threads.py", "--rounds", "1", "--seconds", "0.5",
                "--json", str(tmp_path / "s.json"))  # fmt: skip
    rows = read(tmp_path / "s.json")["rounds"]
    arms = ["plain", "faketime, default", "faketime, fix off"]
    assert [r["arm"] for r in rows] == arms
    for r in rows:
        assert r["work_per_s"] > 0 and r["cpu_cores"] > 0 and r["worst_wake_gap_ms"] >= 0
    for name in arms:
        assert f"{name}: work/s: median " in out and "(every run: " in out


@stack
def test_broker_restart(tmp_path: Path) -> None:
    """broker_restart.py at one round in a stack home of its own: the broker was killed
    and came back, and both long-lived clients were back within the script's bound."""
    home = tmp_path / "home"
    out = bench("broker_restart.py", "--rounds", "1", "--home", str(home),
                "--json", str(tmp_path / "b.json"), timeout_s=420)  # fmt: skip
    (row,) = read(tmp_path / "b.json")["rounds"]
    assert row["kit"] == "this" and row["read_before_kill"] > 0
    assert row["answers_s"] > 0
    # both clients back after the broker answered: a run confirmed, a run read
    assert row["first_confirm_s"] is not None and row["first_confirm_s"] > 0
    assert row["first_read_s"] is not None and row["first_read_s"] > 0
    assert "this answers_s: median " in out
    assert not (home / "kafka" / "kafka.pid").exists()  # stopped at the end


def test_cpu_by_offset(tmp_path: Path) -> None:
    """cpu_by_offset.py for 2 s beside a process that spins: a row per 50 ms of the
    second, the spinner's CPU in them (about a core: some bins hold it)."""
    spin = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 30\n"
                             "while time.time() < end: pass"])  # fmt: skip
    try:
        out = bench("cpu_by_offset.py", "--seconds", "2", "--top", "40",
                    "--json", str(tmp_path / "cpu.json"))  # fmt: skip
    finally:
        spin.kill()
        spin.wait()
    bins = read(tmp_path / "cpu.json")["bins"]
    assert [b["from_ms"] for b in bins] == list(range(0, 1000, 50))
    assert sum(b["all"] for b in bins) / len(bins) > 0.5  # the spinner's core, at least half
    assert out.splitlines()[0].startswith("# python benchmarks/cpu_by_offset.py")


# -- every benchmark has its test ---------------------------------------------------------------

# Each file of benchmarks/ (but its results) and the test here that runs it.
COVERED: dict[str, Callable[..., None]] = {
    "api_profile.py": test_api_profile,
    "api_rate.py": test_api_rate_series_and_report,
    "api_speed.py": test_api_speed_series_and_report,
    "api_stalls.py": test_api_stalls,
    "api_wal.py": test_api_wal,
    "burst_at_t.py": test_storm_series_sitting,
    "cancel_latency.py": test_cancel_latency,
    "preempt_lag.py": test_preempt_lag,
    "gc_pauses.py": test_gc_pauses,
    "gc_trace/sitecustomize.py": test_gc_pauses,
    "http_tasks.py": test_http_tasks_burst,
    "jobs_list.py": test_jobs_list,
    "life_of_a_run.py": test_life_of_a_run_sustain,
    "life_of_a_run_series.py": test_life_of_a_run_series,
    "loadtest_report.py": test_loadtest_report_reads_the_kept_series,
    "pg_async_modes.py": test_pg_async_modes,
    "run_history.py": test_run_history_and_its_plans,
    "run_history_plans.py": test_run_history_and_its_plans,
    "scan_gap.py": test_scan_gap,
    "scratch_db.py": test_run_history_and_its_plans,
    "sim_day.py": test_sim_day_and_its_plot,
    "sim_day_plot.py": test_sim_day_and_its_plot,
    "sim_top_of_hour.py": test_sim_top_of_hour,
    "storm_model.py": test_storm_model_and_sittings,
    "storm_series.sh": test_storm_series_sitting,
    "storm_sittings.py": test_storm_model_and_sittings,
    "trigger_index.py": test_trigger_index,
    "scan_clock.py": test_trigger_index,
    "paused_scan.py": test_paused_scan,
    "one_worker.py": test_preempt_lag,
    "broker_restart.py": test_broker_restart,
    "skewed_threads.py": test_skewed_threads,
    "series_report.py": test_skewed_threads,
    "cpu_by_offset.py": test_cpu_by_offset,
    "start_phases.py": test_http_tasks_burst,
    "start_trace/sitecustomize.py": test_http_tasks_burst,
}


def test_every_benchmark_has_a_test() -> None:
    """A new script in benchmarks/ fails here until a test above runs it at a small size;
    each test named runs (or reads the trace of) the script it stands for."""
    files = {
        str(p.relative_to(BENCH))
        for p in BENCH.rglob("*")
        if p.suffix in (".py", ".sh") and "results" not in p.parts and "__pycache__" not in p.parts
    }
    assert files == set(COVERED), (
        f"without a test: {sorted(files - set(COVERED))}; gone: {sorted(set(COVERED) - files)}"
    )
    module = sys.modules[__name__]
    for name, test in COVERED.items():
        assert getattr(module, test.__name__) is test and test.__name__.startswith("test_")
        source = inspect.getsource(test)
        fixtures = inspect.signature(test).parameters
        if "sitting" in fixtures:
            source += inspect.getsource(sitting)
        assert name.split("/")[0] in source, (name, test.__name__)
