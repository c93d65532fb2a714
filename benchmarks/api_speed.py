"""The HTTP API at speed (issue 16): the queue and jobs mixes through the Locust suites,
against the code before the change (baseline) and after it with 1, 2 and 4 processes.

Each series starts `cronfleet api` for every configuration in turn on the local stack
(nothing else of the kit running), runs the suites at the issue's offered loads, and
appends every figure to --json; `--report` prints the table of every run and draws the
plot. The baseline is the kit at --baseline-ref, extracted with `git archive` and served
from there in the same series, so both sides meet the same machine state.

    python benchmarks/api_speed.py --series 1 --json benchmarks/results/api_speed/api_speed.json
    (three times, with nothing else loading the machine), then
    python benchmarks/api_speed.py --report --json benchmarks/results/api_speed/api_speed.json \\
        --plot docs/plots/api_speed.png

Mixes (offered load; the load generator shares the 2 cores, its CPU is in the figures):
- queue, one call per task: producers enqueue one task per call at 1,000 tasks/s in all,
  8 pull workers lease up to 10 and ack each task with its own call;
- queue, batched: enqueue 100 per call (2,000 tasks/s offered from series 2 on, 1,000 in
  series 1, whose end-to-end figure could not pass 1,000), lease up to 100, ack 100 per call;
- jobs: create 3, get 6, runs 3, pause+resume 2, delete 1 at 500 calls/s, 40 users.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]

MIXES: dict[str, list[str]] = {
    "queue, one call per task": [
        "queue",
        "--producers",
        "8",
        "--consumers",
        "8",
        "--rate",
        "1000",
        "--lease-max",
        "10",
    ],
    "queue, batched (100 per call)": [
        "queue",
        "--producers",
        "2",
        "--consumers",
        "4",
        "--rate",
        "2000",  # twice the target: at 1,000 offered the ramp and drain tail read below it
        "--enqueue-batch",
        "100",
        "--ack-batch",
        "100",
        "--lease-max",
        "100",
    ],
    "jobs mix": [
        "api",
        "--mix",
        "jobs",
        "--rate",
        "600",  # above the target, as the batched queue's: closed-loop users reach at most it
        "--api-users",
        "40",
        "--measure-after-setup",
    ],
}
BATCHED = "queue, batched (100 per call)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def baseline_tree(ref: str, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", ref, "kit"], cwd=REPO, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def serve(source: Path | None, processes: int, port: int, log: Path) -> subprocess.Popen:
    # `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH: the
    # server must start in the tree it is to serve, or a baseline run serves this tree's
    # kit (the first round's "baseline" rows, api_speed_round1.json, were this code).
    tree = source if source is not None else REPO
    env = {**os.environ, "PYTHONPATH": str(tree)}
    served = subprocess.run(
        [sys.executable, "-c", "import kit; print(kit.__file__)"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not served.startswith(str(tree)):
        raise RuntimeError(f"would serve {served}, not the tree {tree}")
    argv = [sys.executable, "-m", "kit.cli", "api", "--port", str(port)]
    if processes > 1:
        argv += ["--workers", str(processes)]
    proc = subprocess.Popen(
        argv,
        cwd=tree,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"the api did not start: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()


def migrate_stack() -> None:
    """The stack's own database at this code's schema: the suites mint their token there,
    and a fresh `cronfleet stack up` is not migrated."""
    sys.path.insert(0, str(REPO))
    from kit.settings import load_settings
    from kit.store import migrate

    migrate.upgrade(load_settings().database_url)


def run_mix(mix: str, port: int, duration_s: int, out: Path) -> dict[str, Any]:
    args = list(MIXES[mix])
    suite = args[0]
    if suite == "queue":
        args += ["--duration", str(duration_s)]
    else:
        args += ["--run-time", f"{duration_s}s"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtest",
            *args,
            "--host",
            f"http://127.0.0.1:{port}",
            "--out",
            str(out),
            "--loglevel",
            "WARNING",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=duration_s + 300,
    )
    if not (out / "summary.json").exists():
        raise RuntimeError(
            f"the {mix!r} suite wrote no summary (exit {result.returncode}): "
            f"{(result.stdout + result.stderr)[-3000:]}"
        )
    summary = json.loads((out / "summary.json").read_text())
    summary["exit_code"] = result.returncode
    return summary


def offered(mix: str) -> int:
    args = MIXES[mix]
    return int(args[args.index("--rate") + 1])


def figures(mix: str, summary: dict[str, Any]) -> dict[str, Any]:
    """The row of the issue's table for one run."""
    cpu = summary["cpu"]
    routes = [r for r in summary["routes"] if "stats" not in r["name"]]
    calls = sum(r["requests"] for r in routes)
    wall = cpu["wall_s"] or 1
    row: dict[str, Any] = {
        "calls_per_s": calls / wall,
        "p50_ms": max((r["p50_ms"] for r in routes), default=0),
        "p99_ms": max((r["p99_ms"] for r in routes), default=0),
        "errors": sum(r["failures"] for r in routes),
        "api_cpu_ms_per_call": 1000 * cpu["cpu_s"].get("api", 0) / max(1, calls),
        "pg_cpu_ms_per_call": 1000 * cpu["cpu_s"].get("postgres", 0) / max(1, calls),
        "locust_share": cpu["shares"].get("locust", 0),
        "api_share": cpu["shares"].get("api", 0),
        "pg_share": cpu["shares"].get("postgres", 0),
    }
    if summary["suite"] == "queue":
        row.update(
            tasks_per_s=min(summary["enqueue_tasks_per_s"], summary["ack_tasks_per_s"]),
            enqueued=summary["enqueued"],
            acked_once=summary["acked"] - summary["acked_twice"],
            lost=summary["lost"],
            acked_twice=summary["acked_twice"],
            stats_consistent=summary["final_stats"].get("queued") == 0
            and summary["final_stats"].get("leased") == 0
            and summary["final_stats"].get("dlq") == 0,
        )
        row["p99_ms"] = summary["worst_p99_ms"]
        row["p99_all_calls_ms"] = summary.get("p99_all_calls_ms")
    else:
        row["calls_per_s"] = summary["rps"]
        row["p50_ms"] = summary["p50_ms"]
        # the worst route's p99, as for the queue: every kind of call under the target
        # (rounds 1 and 2 showed the p99 of all calls, the setup's batch creates included)
        row["p99_ms"] = max(
            (r["p99_ms"] for r in summary["routes"] if "(setup)" not in r["name"]), default=0
        )
        row["p99_all_calls_ms"] = summary["p99_ms"]
    return row


def series(args: argparse.Namespace) -> None:
    results = json.loads(Path(args.json).read_text()) if Path(args.json).exists() else []
    index = 1 + max((r["series"] for r in results), default=0)
    with tempfile.TemporaryDirectory(prefix="cf-api-speed-") as tmp:
        base = baseline_tree(args.baseline_ref, Path(tmp) / "baseline")
        configs = [("baseline", base, 1)] + [("now", None, n) for n in args.processes]
        for label, source, processes in configs:
            port = free_port()
            proc = serve(source, processes, port, Path(tmp) / f"api-{label}-{processes}.log")
            try:
                for mix in args.mix or MIXES:
                    if label == "baseline" and mix == BATCHED and args.baseline_unbatched:
                        continue  # a baseline from before the batch endpoints
                    out = Path(tmp) / f"{label}-{processes}-{len(results)}"
                    summary = run_mix(mix, port, args.duration, out)
                    row = {
                        "series": index,
                        "code": label,
                        "processes": processes,
                        "mix": mix,
                        "load_avg_1m": os.getloadavg()[0],
                        "offered_per_s": offered(mix),
                        **figures(mix, summary),
                    }
                    results.append(row)
                    print(json.dumps(row), flush=True)
                    Path(args.json).write_text(json.dumps(results, indent=1))
            finally:
                stop(proc)


def report(args: argparse.Namespace) -> None:
    results = json.loads(Path(args.json).read_text())
    print(
        "| mix | code | processes | series | offered/s | calls/s | tasks/s | "
        "p50 / p99 ms: worst route (all calls) | "
        "errors | "
        "ledger (acked once / lost / twice, stats) | API / PG CPU ms per call | "
        "CPU share: Locust / API / PG |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- |")
    order = {m: i for i, m in enumerate(MIXES)}
    for r in sorted(
        results,
        key=lambda r: (order[r["mix"]], r["code"] != "baseline", r["processes"], r["series"]),
    ):
        ledger = (
            f"{r['acked_once']:,} / {r['lost']} / {r['acked_twice']}, "
            f"{'consistent' if r['stats_consistent'] else 'INCONSISTENT'}"
            if "tasks_per_s" in r
            else "-"
        )
        tasks = f"{r['tasks_per_s']:,.0f}" if "tasks_per_s" in r else "-"
        p99 = f"{r['p99_ms']:.0f}"
        if r.get("p99_all_calls_ms") is not None:
            p99 += f" ({r['p99_all_calls_ms']:.0f})"
        print(
            f"| {r['mix']} | {r['code']} | {r['processes']} | {r['series']} | "
            f"{r.get('offered_per_s', 1000 if r['mix'] == BATCHED else offered(r['mix'])):,} | "
            f"{r['calls_per_s']:,.0f} | {tasks} | {r['p50_ms']:.0f} / {p99} | "
            f"{r['errors']} | {ledger} | {r['api_cpu_ms_per_call']:.2f} / "
            f"{r['pg_cpu_ms_per_call']:.2f} | {r['locust_share']:.2f} / {r['api_share']:.2f} "
            f"/ {r['pg_share']:.2f} |"
        )
    if args.plot:
        plot(results, Path(args.plot))


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, mix in zip(axes, MIXES, strict=True):
        rows = [r for r in results if r["mix"] == mix]
        keys = sorted({(r["code"] != "baseline", r["processes"]) for r in rows})
        metric = "tasks_per_s" if mix.startswith("queue") else "calls_per_s"
        for i, key in enumerate(keys):
            sub = [r for r in rows if (r["code"] != "baseline", r["processes"]) == key]
            ax.scatter([i] * len(sub), [r[metric] for r in sub], color="C0")
            ax.annotate(
                f"p99 {max(r['p99_ms'] for r in sub):.0f} ms",
                (i, max(r[metric] for r in sub)),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
            )
        ax.set_xticks(range(len(keys)), [f"{k[1]} proc" if k[0] else "baseline" for k in keys])
        target = 500 if mix == "jobs mix" else 1000
        ax.axhline(target, color="red", linestyle="--", label=f"target {target}/s")
        ax.set_title(mix)
        top = max([target, *(r[metric] for r in rows)])
        ax.set_ylim(0, top * 1.15)  # room for the p99 labels under the title
        ax.set_ylabel("tasks/s end to end" if mix.startswith("queue") else "requests/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("cronfleet API on 2 cores (load generator on the same machine): every run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", default="out/api_speed.json")
    parser.add_argument("--series", type=int, default=1, help="series to run now")
    parser.add_argument(
        "--processes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4]
    )
    parser.add_argument(
        "--baseline-ref", default="1508f3d", help="the code before the change (git ref)"
    )
    parser.add_argument(
        "--baseline-unbatched",
        action="store_true",
        help="the baseline has no batch endpoints: skip the batched mix for it",
    )
    parser.add_argument("--duration", type=int, default=12, help="seconds per mix")
    parser.add_argument(
        "--mix", action="append", choices=list(MIXES), help="run this mix only (repeatable)"
    )
    parser.add_argument("--report", action="store_true", help="print the table only")
    parser.add_argument("--plot", default="")
    args = parser.parse_args()
    if args.report:
        report(args)
        return
    migrate_stack()
    for _ in range(args.series):
        series(args)


if __name__ == "__main__":
    main()
