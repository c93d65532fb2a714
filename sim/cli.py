"""`cronfleet sim SCENARIO` and `cronfleet sim size`: run the capacity model, print a
short table, write JSON and a report with plots. Heavy imports happen inside the
commands, so `cronfleet --help` stays fast."""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shlex
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from kit.core.errors import FieldError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "sim",
        help="run the capacity model (cronfleet sim top-of-hour | day | size | tenants ...)",
        description="Run a scenario of the capacity model, or `size` to search for the "
        "smallest fleet that meets a p99 start-lag target in the scenario's worst windows, "
        "or `tenants` to see what a noisy tenant does to the others (docs/tenants.md).",
    )
    p.add_argument("scenario", help="scenario name or .toml path, or `size`, or `tenants`")
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
    p.add_argument("--quiet", action="store_true", help="no progress")
    p.add_argument("--target-p99-start", default="2s", help="size: p99 start-lag target")
    p.add_argument("--emit-tfvars", default=None, help="size: write Terraform variables here")
    p.add_argument(
        "--mix",
        default=None,
        metavar="FILE",
        help="size: your schedules (TOML counts per cron and zone, or a GET /v1/jobs export) "
        "as the day scenario's population (sim/mix.py)",
    )
    p.add_argument(
        "--policy",
        default=None,
        metavar="FILE",
        help="tenants: the operator's tenant policy TOML (the kit's format; default: every "
        "tenant weight 1, nothing limited)",
    )
    p.add_argument(
        "--scenario",
        dest="tenant_scenario",
        default=None,
        metavar="NAME",
        help='tenants: the scenario of tenants (name or .toml path, kind = "tenants")',
    )
    p.add_argument(
        "--window-s",
        type=float,
        default=90.0,
        help="size: simulated window around each peak per candidate",
    )
    p.add_argument(
        "--min-nodes",
        type=int,
        default=1,
        help="size: the fewest scheduler nodes to try (rungs below it are known to miss; "
        "each simulates a backlog for minutes)",
    )
    p.add_argument(
        "--windows",
        type=int,
        default=None,
        help="size: how many of the busiest windows every candidate must meet the target "
        "in (default: 3 for a cron population such as `day`, 1 for the top of the hour)",
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
    if args.scenario == "tenants":
        if args.more:
            raise _usage(f"scenario: unexpected extra argument {args.more!r}")
        if not args.tenant_scenario:
            raise _usage("scenario: `cronfleet sim tenants` needs --scenario NAME")
        return tenants_main(args, args.tenant_scenario)
    if args.more:
        raise _usage(f"scenario: unexpected extra argument {args.more!r}")
    return run_main(args)


def _seed(raw: str) -> int:
    if raw == "random":
        return int.from_bytes(os.urandom(4), "big")
    try:
        seed = int(raw)
    except ValueError:
        raise _usage(f"seed: expected an integer or `random`, got {raw!r}") from None
    if seed < 0:
        raise _usage(f"seed: must not be negative, got {seed}")
    return seed


def rss_gb() -> float:
    """Resident memory now (Linux /proc), else the peak so far."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def simulate(
    scenario: str,
    overrides: list[str],
    seed: int,
    profile: str | None,
    progress: str | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Run one scenario. progress: None, "bar" (a terminal) or "lines" (one per hour)."""
    from sim.metrics import summarise
    from sim.model import Model
    from sim.scenario import ScenarioError, load_profile, load_scenario
    from sim.workload import start_of

    try:
        s = load_scenario(scenario, overrides)
        prof = load_profile(profile, s["profile"])
        model = Model(s, prof, seed)
    except ScenarioError as exc:
        raise _usage(str(exc)) from None
    except FieldError as exc:
        raise _usage(f"{exc.field}: {exc.reason}") from None
    t0 = time.perf_counter()
    start = start_of(s)

    def status(t: float) -> str:
        clock = (start + timedelta(seconds=t)).strftime("%a %H:%M")
        return (
            f"{clock} UTC  {model.stats.counts['generated'] / 1e6:8.2f} M runs done, "
            f"{model.runs.live / 1e6:5.2f} M live, RSS {rss_gb():4.2f} GB"
        )

    if progress == "bar":
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            transient=True,
            console=Console(stderr=True),
        ) as bar:
            task = bar.add_task(s["name"], total=float(s["duration_s"]), status="")

            def tick(t: float, limit: float) -> None:
                bar.update(
                    task,
                    completed=min(max(t, 0.0), float(s["duration_s"])),
                    description=s["name"] if t <= s["duration_s"] else "draining",
                    status=status(t),
                )

            model.run(tick)
    elif progress == "lines":
        shown = {"hour": -2}

        def line(t: float, limit: float) -> None:
            hour = math.floor(t / 3600)
            if hour != shown["hour"]:
                shown["hour"] = hour
                print(f"  {status(t)}  [{time.perf_counter() - t0:6.1f} s]", file=sys.stderr)

        model.run(line)
    else:
        model.run()
    result = summarise(model, time.perf_counter() - t0)
    result["profile"] = prof
    result["profile_path"] = profile or "sim/profiles/default.toml"
    result["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)
    return model, result


def run_main(args: argparse.Namespace) -> int:
    seed = _seed(args.seed)
    from sim.scenario import ScenarioError, read_scenario_file

    try:
        raw = read_scenario_file(args.scenario)
    except ScenarioError as exc:
        raise _usage(str(exc)) from None
    if raw.get("kind") == "storm":
        return storm_main(args, raw, seed)
    if raw.get("kind") == "tenants":
        return tenants_main(args, args.scenario)
    print(f"seed {seed}", file=sys.stderr)
    progress = None if args.quiet else ("bar" if sys.stderr.isatty() else "lines")
    model, result = simulate(args.scenario, args.overrides, seed, args.profile, progress)
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


def storm_main(args: argparse.Namespace, raw: dict[str, Any], seed: int) -> int:
    """A one-machine storm (sim.storm): the start lag of N runs due at the same second."""
    from sim.scenario import ScenarioError, load_profile
    from sim.storm import ScenarioShapeError, load_storm, simulate_storm

    if args.out or args.emit_tfvars:
        raise _usage("out: a storm scenario writes --json only (no report, no tfvars)")
    try:
        s = load_storm(raw, args.overrides)
        prof = load_profile(args.profile, s["profile"])
        r = simulate_storm(raw, args.overrides, seed, prof)
    except (ScenarioError, ScenarioShapeError) as exc:
        raise _usage(str(exc)) from None
    command = "cronfleet sim " + " ".join(
        [shlex.quote(args.scenario), *[f"--set {shlex.quote(o)}" for o in args.overrides]]
        + [f"--seed {seed}"]
        + ([f"--profile {args.profile}"] if args.profile else [])
    )
    r["command"] = command
    r["profile_path"] = args.profile or "sim/profiles/default.toml"
    p50, p99, mx = r["start_lag_s"]
    print(
        f"{r['scenario']} (seed {seed}): {r['runs']:,} runs due at T on {r['cores']} cores, "
        f"{r['workers']} workers, scan {r['scan_ahead_s']:g} s ahead"
    )
    print(f"  start lag p50 / p99 / max   {p50} / {p99} / {mx} s")
    print(
        f"  all claimed at T{r['all_claimed_s']:+} s, all succeeded at T+{r['all_succeeded_s']} s"
        if r["all_claimed_s"] is not None and r["all_succeeded_s"] is not None
        else f"  claimed by T: incomplete; succeeded {r['succeeded']:,}"
    )
    print(f"  started {r['started']:,}, succeeded {r['succeeded']:,}, given back {r['given_back']}")
    if r["published_s"] is not None:
        first, last = r["published_s"]
        print(f"  published from T{first:+} s to T{last:+} s")
    near = [f"{w} at T{at:+} s ({n:,} runs)" for w, at, n in r["heartbeats"] if at < 1.0]
    print("  heartbeats before T+1 s: " + (", ".join(near) or "none"))
    print("  CPU (s): " + ", ".join(f"{k} {v}" for k, v in r["cpu_s"].items()))
    print(f"  command: {command}")
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(json.dumps(r, indent=2, default=str))
        print(f"wrote {args.json_path}")
    return 0


def tenants_main(args: argparse.Namespace, scenario: str) -> int:
    """Tenants sharing the fleet's workers (sim.tenants): each tenant's start lag with the
    kit's fair shares and without, side by side."""
    from sim.scenario import ScenarioError, load_profile, read_scenario_file
    from sim.tenants import compare, load_tenants, read_policy, table

    if args.out or args.emit_tfvars:
        raise _usage("out: a tenants scenario writes --json only (no report, no tfvars)")
    try:
        raw = read_scenario_file(scenario)
        if raw.get("kind") != "tenants":
            raise ScenarioError(f"scenario: {scenario} is not a scenario of tenants")
        s = load_tenants(raw, args.overrides)
        prof = load_profile(args.profile, s["profile"])
    except ScenarioError as exc:
        raise _usage(str(exc)) from None
    policy = read_policy(args.policy)  # FieldError: one line naming the file and entry
    r = compare(s, policy, prof)
    command = "cronfleet sim tenants " + " ".join(
        [f"--scenario {shlex.quote(scenario)}"]
        + ([f"--policy {shlex.quote(args.policy)}"] if args.policy else [])
        + [f"--set {shlex.quote(o)}" for o in args.overrides]
        + ([f"--profile {shlex.quote(args.profile)}"] if args.profile else [])
    )
    r["command"] = command
    r["scenario_as_run"] = s
    f = s["fleet"]
    print(
        f"{s['name']}: {f['workers']} workers of {f['places']} places, {f['cores']} cores, "
        f"{f['connections_per_target']} connections per target per worker; "
        f"policy {args.policy or 'none (weight 1 each, no limit)'}"
    )
    print("start lag: from the run's second to its start (http: its target receives it)")
    print("waited: runs that found no slot at once; for share, limited: most of its runs")
    print("waiting at once (sampled each second) for their turn, or at one of its limits;")
    print("shares off: first come, first served (cronfleet worker --no-fair-share).")
    for line in table(r):
        print(line)
    print(f"command: {command}")
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(json.dumps(r, indent=2, default=str))
        print(f"wrote {args.json_path}")
    return 0


def _s(v: float | None) -> str:
    return "none (no run started)" if v is None else f"{v} s"


def _print_table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    f, a, h = r["fleet"], r["audit"], r["history"]
    t = Table(title=f"{r['scenario']} (seed {r['seed']})", show_header=True)
    t.add_column("measure")
    t.add_column("value", justify="right")
    pw, wm = r["peak_window"], r["worst_minute"]
    if pw:
        t.add_row(
            f"p99 start lag, peak window ({pw['from'][11:16]} UTC, {pw['due']:,} runs due)",
            _s(pw["start_lag_s"]["p99"]),
        )
    if wm:
        t.add_row(
            f"p99 start lag, worst minute ({wm['from'][11:16]} UTC)", _s(wm["start_lag_s"]["p99"])
        )
    t.add_row("p99 start lag, whole period", _s(r["start_lag_s"]["p99"]))
    t.add_row("max start lag, whole period", _s(r["start_lag_s"]["max"]))
    t.add_row("p99 dispatch lag, whole period", _s(r["dispatch_lag_s"]["p99"]))
    t.add_row("runs fired", f"{a['fired']:,}")
    t.add_row("runs still in flight at the end", f"{r['in_flight_at_end']:,}")
    t.add_row("dead-lettered", f"{a['dead_lettered']:,}")
    if a.get("cancelled"):
        t.add_row("cancelled (overlap 'replace')", f"{a['cancelled']:,}")
    t.add_row("dropped", f"{a['dropped']:,}")
    t.add_row("duplicated", f"{a['duplicated']:,}")
    t.add_row("max queue depth", f"{r['max_queue_depth']:,}")
    t.add_row("peak worker utilisation", f"{r['peak_worker_utilisation'] * 100:.0f}%")
    hist = f"{h['rows_per_day']:,} rows/day"
    if h.get("bytes_per_day"):
        hist += (
            f", {h['bytes_per_day'] / 1e9:.1f} GB/day, {h['retention_days']} days "
            f"{h['retention_bytes'] / 1e12:.2f} TB"
        )
    t.add_row("run history written", hist)
    t.add_row("percentile error", f"±{r['percentile_error']['relative'] * 100:.2f}% (streamed)")
    t.add_row(
        "fleet used",
        f"{f['nodes']} nodes, {f['partitions']} partitions, "
        f"{f['workers']} workers x {f['concurrency']}",
    )
    t.add_row(
        "wall time",
        f"{r['model']['wall_s']} s for {r['model']['simulated_s']} s simulated, "
        f"peak RSS {r['peak_rss_gb']} GB",
    )
    Console().print(t)
    if a["violations"]:
        print("invariant violations: " + "; ".join(a["violations"]))


# -- sizing ---------------------------------------------------------------------------------


def _mix_scenario(mix_path: str, base: str) -> tuple[str, str]:
    """The base scenario (a whole day) with the team's mix as its population, written
    beside the mix (`<mix>.scenario.toml`, to replay with `cronfleet sim`); the path and a
    note naming the mix's size and hash."""
    import hashlib

    from sim.mix import mix_scenario_text, read_mix
    from sim.scenario import ScenarioError

    try:
        mix = read_mix(mix_path)
        text = mix_scenario_text(mix, mix_path, base)
    except ScenarioError as exc:
        raise _usage(str(exc)) from None
    out = Path(mix_path).with_suffix(".scenario.toml")
    out.write_text(text)
    digest = hashlib.sha256(Path(mix_path).read_bytes()).hexdigest()[:12]
    left = ", ".join(f"{n:,} {why}" for why, n in sorted(mix.left_out.items()))
    print(
        f"mix {mix_path}: {mix.schedules:,} schedules in {len(mix.counts)} shapes"
        + (f" (left out: {left})" if left else "")
        + f"; scenario {out}",
        file=sys.stderr,
    )
    return str(out), f" sha256 {digest}, {mix.schedules:,} schedules"


def _duration_s(raw: str) -> float:
    txt = raw.strip().lower()
    try:
        if txt.endswith("ms"):
            return float(txt[:-2]) / 1000
        return float(txt.rstrip("s"))
    except ValueError:
        raise _usage(f"target-p99-start: expected a duration like 2s, got {raw!r}") from None


def candidate_meets(r: dict[str, Any], target_s: float) -> bool:
    """A sizing candidate meets the target when the window's p99 start lag exists and is
    within it, nothing was dropped and nothing is left in flight after the drain. A
    missing p99 (no run started) is a miss, never 0."""
    p99 = r["start_lag_s"]["p99"]
    return (
        p99 is not None
        and p99 <= target_s
        and r["audit"]["dropped"] == 0
        and r["in_flight_at_end"] == 0
    )


def size_windows(base: dict[str, Any], window_s: float, count: int) -> list[dict[str, Any]]:
    """The windows every candidate is simulated over. The top of the hour: the window
    around its peak. A cron population: the `count` busiest windows of the period by
    runs due (found from kit.core's fire times without simulating; a day's are its zones'
    midnights), and the busiest top of an hour not among them (the hourly jobs' peak,
    another shape: less due, less jitter), each simulated with a warm lead-in."""
    from datetime import datetime

    from sim.workload import WorkloadStream, busiest_windows, due_per_second, start_of

    w = int(window_s)
    if base["workload"]["arrivals"] != "cron":
        lead = 20
        return [
            {
                "label": f"the peak ({int(base['peak_at_s'])} s into the scenario)",
                "due": None,
                "sets": [f"duration_s={w}", f"peak_at_s={lead}", "drain_s=600"],
            }
        ]
    per_s = due_per_second(WorkloadStream(base, 0))
    start: datetime = start_of(base)
    out = []
    chosen = busiest_windows(per_s, w, count)
    top = busiest_top_of_hour(per_s, w, start, [sec for sec, _ in chosen])
    for sec, due in chosen + ([top] if top else []):
        at = start + timedelta(seconds=sec)
        kind = " (top of hour)" if top and sec == top[0] else ""
        out.append(
            {
                "label": f"{at:%a %H:%M:%S} UTC{kind}",
                "due": round(due),
                "sets": [
                    f"start={at:%Y-%m-%dT%H:%M:%SZ}",
                    f"duration_s={w}",
                    "lead_in_s=60",
                    "drain_s=600",
                ],
            }
        )
    return out


TOP_LEAD_S = 10  # a top-of-hour window starts this far before the hour: as busiest_windows'


def busiest_top_of_hour(
    per_s: Any, window_s: int, start: Any, taken: list[int]
) -> tuple[int, float] | None:
    """The window starting TOP_LEAD_S before a top of the hour with the most runs due,
    among those overlapping no window already taken: (start second, runs due)."""
    first = -(-start.minute * 60 - start.second) % 3600  # seconds to the first hour
    best: tuple[int, float] | None = None
    for hour in range(first, per_s.size, 3600):
        sec = max(0, hour - TOP_LEAD_S)
        if any(abs(sec - t) < window_s for t in taken) or sec + window_s > per_s.size:
            continue
        due = float(per_s[sec : sec + window_s].sum())
        if due > 0 and (best is None or due > best[1]):
            best = (sec, due)
    return best


NODE_LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def fewest_nodes(meets: Callable[[int], bool], least: int, most: int) -> int | None:
    """The fewest scheduler nodes from `least` to `most` that meet, more nodes never
    meeting worse: up the ladder to the first rung that meets, then halving between it
    and the rung below (which missed). The ladder alone answered 12 where 10 meet."""
    ladder = [n for n in NODE_LADDER if least <= n <= most]
    found = next((n for n in ladder if meets(n)), None)
    if found is None:
        return None
    lo = max((n for n in ladder if n < found), default=found)  # missed, or none below
    hi = found
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def size_main(args: argparse.Namespace) -> int:
    """Smallest fleet (fewest nodes, then fewest workers) meeting the target in every
    window checked, each candidate simulated over those windows only. A candidate misses
    when a window's p99 exceeds the target or is missing (no run started), when a run is
    dropped, or when runs are still in flight once the window has drained."""
    from rich.console import Console
    from rich.table import Table

    from sim.scenario import ScenarioError, load_scenario

    scenario = args.more or ("day" if args.mix else "top-of-hour")
    target = _duration_s(args.target_p99_start)
    seed = _seed(args.seed)
    mix_note = ""
    if args.mix:
        scenario, mix_note = _mix_scenario(args.mix, scenario)
    try:
        base = load_scenario(scenario, args.overrides)
    except ScenarioError as exc:
        raise _usage(str(exc)) from None
    cron = base["workload"]["arrivals"] == "cron"
    if not cron and not 0 <= base["peak_at_s"] < base["duration_s"]:
        raise _usage("size: the scenario has no peak inside its window (peak_at_s)")
    count = args.windows if args.windows is not None else (3 if cron else 1)
    if count < 1:
        raise _usage("windows: must be at least 1")
    if args.min_nodes < 1:
        raise _usage("min-nodes: must be at least 1")
    windows = size_windows(base, args.window_s, count)
    if not windows:
        raise _usage("size: the scenario has no runs due")
    print("windows checked:", file=sys.stderr)
    for win in windows:
        due = f", {win['due']:,} runs due" if win["due"] is not None else ""
        print(f"  {win['label']}{due}", file=sys.stderr)
    tried: list[tuple[int, int, int, str, float | None, int]] = []
    known: dict[tuple[int, int, int, str], bool] = {}

    def meets_in(nodes: int, workers: int, parts: int, win: dict[str, Any]) -> bool:
        key = (nodes, workers, parts, win["label"])
        if key in known:  # the same seed gives the same result: not simulated twice
            return known[key]
        sets = [
            *args.overrides,
            *win["sets"],
            f"fleet.nodes={nodes}",
            f"fleet.workers={workers}",
            f"fleet.partitions={parts}",
        ]
        _, r = simulate(scenario, sets, seed, args.profile)
        p99 = r["start_lag_s"]["p99"]
        good = candidate_meets(r, target)
        tried.append((nodes, workers, parts, win["label"], p99, int(good)))
        known[key] = good
        shown = "   none" if p99 is None else f"{p99:8.3f}"
        print(
            f"  nodes={nodes:>3} workers={workers:>5} partitions={parts:>5}  {win['label']:<22}"
            f" p99 start {shown} s  {'meets' if good else 'misses'}",
            file=sys.stderr,
        )
        return good

    def meets(nodes: int, workers: int, parts: int, wins: list[dict[str, Any]]) -> bool:
        return all(meets_in(nodes, workers, parts, w) for w in wins)

    f = base["fleet"]
    parts = int(f["partitions"])
    w_max = int(f["workers"]) * 4
    nodes = workers = 0  # 0: nothing found yet; each window only raises them
    for win in windows:
        if nodes and meets_in(nodes, workers, parts, win):
            continue  # the fleet found so far already meets this window
        most_workers = max(w_max, workers)

        def meets_with_most_workers(n: int, w: int = most_workers, win: Any = win) -> bool:
            return meets_in(n, w, parts, win)

        found = fewest_nodes(meets_with_most_workers, max(nodes, args.min_nodes), parts)
        if found is None:
            print("no fleet within the search bounds meets the target", file=sys.stderr)
            return 1
        nodes = found
        lo, hi = max(workers - 1, 1), max(w_max, workers)  # hi meets: fewest that still do
        while hi - lo > max(1, hi // 50):
            mid = (lo + hi) // 2
            if meets_in(nodes, mid, parts, win):
                hi = mid
            else:
                lo = mid
        workers = hi
    if len(windows) > 1 and not meets(nodes, workers, parts, windows):
        print("the fleet found misses an earlier window: no result", file=sys.stderr)
        return 1
    best_parts = parts
    for cand in sorted({max(nodes * 16, 64), 256, parts}):
        if cand < parts and cand >= nodes and meets(nodes, workers, cand, windows):
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
    t = Table(
        title=f"sim size: {scenario}, p99 start lag <= {target} s in its busiest windows "
        f"(seed {seed})"
    )
    for col in ("nodes", "workers", "partitions", "window", "p99 start (s)", "meets"):
        t.add_column(col, justify="right" if col != "window" else "left")
    for n, w, pp, label, p99, good in tried:
        t.add_row(
            str(n),
            str(w),
            str(pp),
            label,
            "none" if p99 is None else f"{p99:.3f}",
            "yes" if good else "no",
        )
    Console().print(t)
    print(
        f"recommended: {nodes} scheduler nodes, {workers} workers x {rec['worker_concurrency']}"
        f" slots, {best_parts} partitions (+1 node and +{math.ceil(workers / 10)} workers of "
        "headroom to survive the loss of one)"
    )
    if args.emit_tfvars:
        from sim.tfvars import tfvars_text, with_headroom

        what = f"--mix {args.mix}{mix_note}" if args.mix else scenario
        least = f" --min-nodes {args.min_nodes}" if args.min_nodes > 1 else ""
        header = (
            f"cronfleet sim size {what} --target-p99-start {args.target_p99_start}{least} "
            f"(seed {seed}; windows: {'; '.join(w['label'] for w in windows)})"
        )
        Path(args.emit_tfvars).write_text(tfvars_text(with_headroom(rec), header))
        print(f"wrote {args.emit_tfvars}")
    return 0
