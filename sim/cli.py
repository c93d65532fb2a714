"""`cronfleet sim SCENARIO` and `cronfleet sim size`: run the capacity model, print a
short table, write JSON and a report with plots. Heavy imports happen inside the
commands, so `cronfleet --help` stays fast."""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from kit.core.errors import FieldError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sim",
        help="run the capacity model (cronfleet sim top-of-hour | cronfleet sim size ...)",
        description="Run a scenario of the capacity model, or `size` to search for the "
        "smallest fleet that meets a p99 start-lag target at the peak.",
    )
    p.add_argument("scenario", help="scenario name or .toml path, or `size`")
    p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    _options(p)
    p.set_defaults(func=main)


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario value, e.g. fleet.workers=300 (repeatable)",
    )
    p.add_argument("--seed", default="1", help="random seed (an integer, or `random`)")
    p.add_argument("--profile", default=None, help="calibration profile TOML")
    p.add_argument("--json", dest="json_path", default=None, help="write the result as JSON")
    p.add_argument("--out", default=None, help="write plots and a Markdown report here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--target-p99-start", default="2s", help="size: p99 start-lag target")
    p.add_argument("--emit-tfvars", default=None, help="size: write Terraform variables here")
    p.add_argument(
        "--window-s",
        type=float,
        default=90.0,
        help="size: simulated window around the peak per candidate",
    )


def _usage(msg: str) -> FieldError:
    """Bad input on the command line: `cronfleet` prints it as one line and exits 2."""
    field, _, reason = msg.partition(": ")
    return FieldError(field, reason) if reason else FieldError("sim", msg)


def main(args: argparse.Namespace) -> int:
    if args.rest:  # options after the positional(s): parse them the same way
        extra = argparse.ArgumentParser(prog="cronfleet sim", add_help=False)
        extra.add_argument("more", nargs="?")
        _options(extra)
        for action in extra._actions:
            if action.dest in vars(args) and action.dest != "more":
                action.default = getattr(args, action.dest)
        ns = extra.parse_args(args.rest)
        for k, v in vars(ns).items():
            setattr(args, k, v)
    else:
        args.more = None
    if args.scenario == "size":
        return size_main(args)
    if args.more:
        raise _usage(f"scenario: unexpected extra argument {args.more!r}")
    return run_main(args)


def _seed(raw: str) -> int:
    if raw == "random":
        return int.from_bytes(os.urandom(4), "big")
    try:
        return int(raw)
    except ValueError:
        raise _usage(f"seed: expected an integer or `random`, got {raw!r}") from None


def simulate(
    scenario: str, overrides: list[str], seed: int, profile: str | None, progress: bool = False
) -> tuple[Any, dict[str, Any]]:
    from sim.metrics import summarise
    from sim.model import Model
    from sim.scenario import ScenarioError, load_profile, load_scenario

    try:
        s = load_scenario(scenario, overrides)
        prof = load_profile(profile, s["profile"])
    except ScenarioError as exc:
        raise _usage(str(exc)) from None
    t0 = time.perf_counter()
    model = Model(s, prof, seed)
    if progress:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:.0f}/{task.total:.0f} s simulated"),
            TimeElapsedColumn(),
            transient=True,
            stderr=True,
        ) as bar:
            task = bar.add_task(s["name"], total=float(s["duration_s"]))

            def tick(t: float, limit: float) -> None:
                bar.update(
                    task,
                    completed=min(t, float(s["duration_s"])),
                    description=s["name"] if t <= s["duration_s"] else "draining",
                )

            model.run(tick)
    else:
        model.run()
    result = summarise(model, time.perf_counter() - t0)
    result["profile"] = prof
    result["profile_path"] = profile or "sim/profiles/default.toml"
    return model, result


def run_main(args: argparse.Namespace) -> int:
    seed = _seed(args.seed)
    print(f"seed {seed}", file=sys.stderr)
    model, result = simulate(
        args.scenario,
        args.overrides,
        seed,
        args.profile,
        progress=not args.quiet and sys.stderr.isatty(),
    )
    command = "cronfleet sim " + " ".join(
        [
            shlex.quote(args.scenario),
            *[f"--set {shlex.quote(o)}" for o in args.overrides],
            f"--seed {seed}",
        ]
        + ([f"--profile {args.profile}"] if args.profile else [])
    )
    result["command"] = command
    _print_table(result)
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(json.dumps(result, indent=2, default=str))
        print(f"wrote {args.json_path}")
    if args.out:
        from sim.report import write_report

        md = write_report(model, result, Path(args.out), command)
        print(f"wrote {md} (and its plots)")
    return 0


def _print_table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    f, a = r["fleet"], r["audit"]
    t = Table(title=f"{r['scenario']} (seed {r['seed']})", show_header=True)
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_row("p99 start lag", f"{r['start_lag_s']['p99']} s")
    t.add_row("max start lag", f"{r['start_lag_s']['max']} s")
    t.add_row("p99 dispatch lag", f"{r['dispatch_lag_s']['p99']} s")
    t.add_row("runs fired", f"{a['fired']:,}")
    t.add_row("dead-lettered", f"{a['dead_lettered']:,}")
    t.add_row("dropped", f"{a['dropped']:,}")
    t.add_row("duplicated", f"{a['duplicated']:,}")
    t.add_row("max queue depth", f"{r['max_queue_depth']:,}")
    t.add_row(
        "fleet used",
        f"{f['nodes']} nodes, {f['partitions']} partitions, "
        f"{f['workers']} workers x {f['concurrency']}",
    )
    t.add_row("wall time", f"{r['model']['wall_s']} s for {r['model']['simulated_s']} s simulated")
    Console().print(t)
    if a["violations"]:
        print("invariant violations: " + "; ".join(a["violations"]))


# -- sizing ---------------------------------------------------------------------------------


def _duration_s(raw: str) -> float:
    txt = raw.strip().lower()
    try:
        if txt.endswith("ms"):
            return float(txt[:-2]) / 1000
        return float(txt.rstrip("s"))
    except ValueError:
        raise _usage(f"target-p99-start: expected a duration like 2s, got {raw!r}") from None


def size_main(args: argparse.Namespace) -> int:
    """Smallest fleet (fewest nodes, then fewest workers) meeting the target at the peak,
    each candidate simulated over a short window around the peak only."""
    from rich.console import Console
    from rich.table import Table

    from sim.scenario import ScenarioError, load_scenario

    scenario = args.more or "top-of-hour"
    target = _duration_s(args.target_p99_start)
    seed = _seed(args.seed)
    try:
        base = load_scenario(scenario, args.overrides)
    except ScenarioError as exc:
        raise _usage(str(exc)) from None
    lead = 20.0
    window = [f"duration_s={int(args.window_s)}", f"peak_at_s={int(lead)}", "drain_s=600"]
    if not 0 <= base["peak_at_s"] < base["duration_s"]:
        raise _usage("size: the scenario has no peak inside its window (peak_at_s)")
    tried: list[tuple[int, int, int, float, int]] = []

    def ok(nodes: int, workers: int, parts: int) -> bool:
        sets = [
            *args.overrides,
            *window,
            f"fleet.nodes={nodes}",
            f"fleet.workers={workers}",
            f"fleet.partitions={parts}",
        ]
        _, r = simulate(scenario, sets, seed, args.profile)
        p99 = r["start_lag_s"]["p99"] or 0.0
        good = p99 <= target and r["audit"]["dropped"] == 0
        tried.append((nodes, workers, parts, p99, int(good)))
        print(
            f"  nodes={nodes:>3} workers={workers:>5} partitions={parts:>5}  p99 start "
            f"{p99:8.3f} s  {'meets' if good else 'misses'}",
            file=sys.stderr,
        )
        return good

    f = base["fleet"]
    parts = int(f["partitions"])
    w_max = int(f["workers"]) * 4
    nodes = None
    for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32):
        if n <= parts and ok(n, w_max, parts):
            nodes = n
            break
    if nodes is None:
        print("no fleet within the search bounds meets the target", file=sys.stderr)
        return 1
    lo, hi = 1, w_max  # hi meets the target; find the fewest workers that still does
    while hi - lo > max(1, hi // 50):
        mid = (lo + hi) // 2
        if ok(nodes, mid, parts):
            hi = mid
        else:
            lo = mid
    workers = hi
    best_parts = parts
    for cand in sorted({max(nodes * 16, 64), 256, parts}):
        if cand < parts and cand >= nodes and ok(nodes, workers, cand):
            best_parts = cand
            break
    rec = {
        "scheduler_nodes": nodes,
        "workers": workers,
        "worker_concurrency": int(f["concurrency"]),
        "partitions": best_parts,
        "db_max_connections": int(f["db_connections"]),
        "kafka_partitions_per_tier": int(f["kafka_partitions"]),
    }
    t = Table(title=f"sim size: {scenario}, p99 start lag <= {target} s at the peak (seed {seed})")
    t.add_column("nodes", justify="right")
    t.add_column("workers", justify="right")
    t.add_column("partitions", justify="right")
    t.add_column("p99 start (s)", justify="right")
    t.add_column("meets")
    for n, w, pp, p99, good in tried:
        t.add_row(str(n), str(w), str(pp), f"{p99:.3f}", "yes" if good else "no")
    Console().print(t)
    print(
        f"recommended: {nodes} scheduler nodes, {workers} workers x {rec['worker_concurrency']}"
        f" slots, {best_parts} partitions (+1 node and +{math.ceil(workers / 10)} workers of "
        "headroom to survive the loss of one)"
    )
    if args.emit_tfvars:
        from sim.tfvars import tfvars_text, with_headroom

        header = (
            f"cronfleet sim size {scenario} --target-p99-start {args.target_p99_start} "
            f"(seed {seed})"
        )
        Path(args.emit_tfvars).write_text(tfvars_text(with_headroom(rec), header))
        print(f"wrote {args.emit_tfvars}")
    return 0
