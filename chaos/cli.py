"""`cronfleet chaos list`, `cronfleet chaos run DRILL|all [--cycles N] [--seed S]
[--json PATH] [--out DIR]`, `cronfleet chaos soak --hours H --rate R` and `cronfleet
chaos summary JSON... --out DIR`: chaos drills (and a soak) on a stack of their own.

Each drill starts its own fleet (api, two scheduler nodes, workers, reaper) on the
drills' own PostgreSQL and Kafka ($CRONFLEET_HOME/chaos-stack, started here if needed),
runs a workload of cron, interval and one-off jobs whose tasks record their effects in a
ledger outside the kit, injects its fault cycle after cycle, heals it, waits until the
fleet is quiet and audits: lost, unexpected, duplicate deliveries (allowed), duplicate
effects and stale writes accepted (both must be 0), start lag and time to recover. It
writes report.md (with plots) and result.json per drill under --out.

Exit code: 0 when every drill passed, 1 when one failed (or could not set up its
fault), 2 for bad input. The seed is printed; the same seed replays the same faults.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from kit.core.errors import FieldError

ROLES = ("api", "scheduler", "worker", "reaper")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "chaos",
        help="chaos drills on a stack of their own: list, run DRILL|all",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="chaos_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the drills, with what each one does")
    listing.set_defaults(func=list_drills)
    run = actions.add_parser("run", help="run a drill (or `all`) and audit it")
    run.add_argument("drill", help="a drill's name or number (see `cronfleet chaos list`), or all")
    run.add_argument("--cycles", type=int, default=10, help="fault/heal cycles (default 10)")
    run.add_argument("--seed", default="random", help="an integer, or `random` (printed)")
    run.add_argument("--json", dest="json_path", help="write every drill's result here")
    run.add_argument("--out", default="out/chaos", help="reports go to OUT/<drill>/")
    run.add_argument("--home", help="the drills' stack home (default $CRONFLEET_HOME/chaos-stack)")
    run.add_argument(
        "--keep-stack", action="store_true", help="leave the drills' stack running afterwards"
    )
    run.add_argument(
        "--plant",
        action="append",
        default=[],
        metavar="ROLE=MODULE",
        help="start ROLE's services as `python -m MODULE ...` (a wrapper that plants a bug "
        "and calls kit.cli.main; for proving that the drills catch it)",
    )
    run.add_argument("--no-model", action="store_true", help="skip the model's prediction")
    run.add_argument(
        "--target",
        metavar="FILE",
        help="drill a deployed fleet instead of the drills' own stack: its API, database, "
        "brokers, ledger path and each machine's stop and start commands (chaos/target.py)",
    )
    run.set_defaults(func=run_drills)
    soak = actions.add_parser(
        "soak",
        help="the whole fleet for hours under a steady mix, the random nemesis on; every "
        "resource's trend, the audit at the end",
    )
    soak.add_argument("--hours", type=float, required=True, help="how long (0.05: 3 min)")
    soak.add_argument("--rate", type=float, required=True, help="steady runs per second")
    soak.add_argument("--seed", default="random", help="an integer, or `random` (printed)")
    soak.add_argument(
        "--fault-every", type=float, default=180.0, help="seconds between nemesis cycles"
    )
    soak.add_argument("--sample-every", type=float, default=10.0, help="seconds between samples")
    soak.add_argument("--out", default="out/chaos", help="the report goes to OUT/soak/")
    soak.add_argument("--json", dest="json_path", help="write the soak's summary here")
    soak.add_argument("--home", help="the drills' stack home (default $CRONFLEET_HOME/chaos-stack)")
    soak.add_argument(
        "--keep-stack", action="store_true", help="leave the drills' stack running afterwards"
    )
    soak.set_defaults(func=run_soak_command)
    summary = actions.add_parser(
        "summary",
        help="one table and plot from the --json results of several runs (drills run apart)",
    )
    summary.add_argument("results", nargs="+", metavar="JSON", help="`chaos run --json` files")
    summary.add_argument("--out", required=True, help="writes OUT/summary.md and summary.png")
    summary.set_defaults(func=summarise)


def list_drills(args: argparse.Namespace) -> int:
    from chaos.drills import DRILLS

    for drill in DRILLS.values():
        print(f"{drill.number}  {drill.name:<20} {drill.title}")
        print(f"   {'':<20} {drill.summary}")
    return 0


def _seed(raw: str) -> int:
    if raw == "random":
        return int.from_bytes(os.urandom(4), "big")
    try:
        return int(raw)
    except ValueError:
        raise FieldError("--seed", f"expected an integer or `random`, got {raw!r}") from None


def _plants(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        role, sep, module = item.partition("=")
        if not sep or role not in ROLES:
            raise FieldError("--plant", f"expected ROLE=MODULE with ROLE one of {', '.join(ROLES)}")
        if not re.fullmatch(r"[A-Za-z_][\w.]*", module):
            raise FieldError("--plant", f"{module!r} is not a module name")
        out[role] = module
    return out


def _selected(name: str) -> list[str]:
    from chaos.drills import DRILLS

    if name == "all":
        return list(DRILLS)
    for drill in DRILLS.values():
        if name in (drill.name, str(drill.number)):
            return [drill.name]
    raise FieldError("drill", f"no drill {name!r} (known: {', '.join(DRILLS)}, all)")


def run_drills(args: argparse.Namespace) -> int:
    from chaos.drills import DRILLS
    from chaos.runner import RunOptions, run_drill
    from chaos.stack import ChaosStack, StackFailure, default_home

    names = _selected(args.drill)
    if not 1 <= args.cycles <= 10_000:
        raise FieldError("--cycles", f"{args.cycles} is not between 1 and 10000")
    seed = _seed(args.seed)
    plants = _plants(args.plant)
    target = None
    if args.target:
        from chaos.target import TargetStack, load_target

        target = load_target(args.target)
        cannot = [n for n in names if not DRILLS[n].on_target]
        if cannot or plants:
            runs = ", ".join(n for n, d in DRILLS.items() if d.on_target)
            raise FieldError(
                "--target",
                f"{', '.join(cannot) or '--plant'} acts on processes of the drills' own stack; "
                f"against a deployment: {runs}",
            )
    print(f"chaos: seed {seed}", file=sys.stderr, flush=True)
    _stop_on_sigterm()
    opts = RunOptions(
        args.cycles, seed, Path(args.out), plants, model=not args.no_model, target=target
    )
    stack: Any = TargetStack(target) if target else None
    if target is None:
        stack = ChaosStack(Path(args.home) if args.home else default_home())
        try:
            stack.up()
        except StackFailure as exc:
            print(f"cronfleet chaos run: the drills' stack did not come up: {exc}", file=sys.stderr)
            return 1
    results = []
    try:
        for name in names:
            command = _command(name, args, seed)
            print(f"chaos: {name}: {args.cycles} cycles ...", file=sys.stderr, flush=True)
            result = run_drill(DRILLS[name](), stack, opts, command)
            results.append(result)
            _print_result(result)
    finally:
        if not args.keep_stack and target is None:
            try:
                stack.down()
            except StackFailure as exc:
                print(f"chaos: stopping the drills' stack: {exc}", file=sys.stderr)
    payload = {
        "seed": seed,
        "cycles": args.cycles,
        "commit": code_commit(),
        "drills": [r.to_json() for r in results],
    }
    if args.json_path:
        path = Path(args.json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=str))
    if len(results) > 1:
        from chaos.summary import write_summary

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        print(f"chaos: summary in {write_summary(payload, out)[0]}", file=sys.stderr)
    failed = [r.drill for r in results if not r.passed]
    if failed:
        print(f"chaos: FAILED: {', '.join(failed)} (seed {seed})", file=sys.stderr)
        return 1
    return 0


def run_soak_command(args: argparse.Namespace) -> int:
    from chaos.soak import run_soak
    from chaos.stack import ChaosStack, StackFailure, default_home

    if not 0 < args.hours <= 48:
        raise FieldError("--hours", f"{args.hours} is not in (0, 48]")
    if not 0 < args.rate <= 50_000:
        raise FieldError("--rate", f"{args.rate} is not in (0, 50000]")
    if not 30 <= args.fault_every <= 3600:
        raise FieldError("--fault-every", f"{args.fault_every} is not between 30 and 3600")
    if args.fault_every > args.hours * 3600:
        raise FieldError(
            "--fault-every",
            f"{args.fault_every:g} s is longer than the soak ({args.hours * 3600:g} s): its one "
            "nemesis cycle would keep it running that long",
        )
    if not 1 <= args.sample_every <= 600:
        raise FieldError("--sample-every", f"{args.sample_every} is not between 1 and 600")
    seed = _seed(args.seed)
    print(f"chaos: seed {seed}", file=sys.stderr, flush=True)
    _stop_on_sigterm()
    command = shlex.join(
        ["cronfleet", "chaos", "soak", "--hours", f"{args.hours:g}", "--rate", f"{args.rate:g}",
         "--seed", str(seed), "--fault-every", f"{args.fault_every:g}"]
    )  # fmt: skip
    stack = ChaosStack(Path(args.home) if args.home else default_home())
    try:
        stack.up()
    except StackFailure as exc:
        print(f"cronfleet chaos soak: the drills' stack did not come up: {exc}", file=sys.stderr)
        return 1
    try:
        result, summary = run_soak(
            args.hours, args.rate, seed, Path(args.out), stack,
            args.fault_every, args.sample_every, command,
        )  # fmt: skip
    finally:
        if not args.keep_stack:
            try:
                stack.down()
            except StackFailure as exc:
                print(f"chaos: stopping the drills' stack: {exc}", file=sys.stderr)
    summary["commit"] = code_commit()
    if args.json_path:
        path = Path(args.json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=1, default=str))
    _print_result(result)
    print(
        f"soak: {summary.get('runs_per_s')} runs/s; not flat: {summary['not_flat'] or 'none'} "
        f"({result.out}/soak.md)",
        flush=True,
    )
    return 0 if result.passed and not summary["not_flat"] else 1


def _stop_on_sigterm() -> None:
    """A drill or soak ended by SIGTERM (`kill`, a CI job's timeout) cleans up as Ctrl-C
    does: by default the signal ends the process before any `finally`, and the fleet's
    services, each in a session of its own, went on running beside the next drill."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    with contextlib.suppress(ValueError):  # not the main thread (main() called by a test)
        signal.signal(signal.SIGTERM, interrupt)


def summarise(args: argparse.Namespace) -> int:
    """Drills run one at a time (a 100-cycle series takes hours) summed up in one table:
    each drill's row as its own run reported it, the seeds and cycle counts they ran at."""
    from chaos.summary import write_summary

    drills: list[dict] = []
    seeds: set[str] = set()
    cycles: set[str] = set()
    commits: set[str] = set()
    for raw in args.results:
        try:
            payload = json.loads(Path(raw).read_text())
            drills += payload["drills"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FieldError("results", f"{raw}: not a `chaos run --json` file ({exc})") from None
        seeds.add(str(payload.get("seed")))
        cycles.add(str(payload.get("cycles")))
        commits.add(str(payload.get("commit") or "unrecorded"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    merged = {
        "seed": " / ".join(sorted(seeds)),
        "cycles": " / ".join(sorted(cycles)),
        "commit": " / ".join(sorted(commits)),
    }
    written = write_summary({**merged, "drills": drills}, out)
    print(f"chaos: summary of {len(drills)} drills in {written[0]}", file=sys.stderr)
    return 0 if all(d.get("passed") for d in drills) else 1


def code_commit() -> str | None:
    """The commit of the code the drills ran (+dirty when the tree had changes), or None
    outside a git checkout: a report says what it measured."""
    import subprocess

    root = str(Path(__file__).resolve().parents[1])
    try:
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return None
    return (head + ("+dirty" if dirty else "")) or None


def _command(name: str, args: argparse.Namespace, seed: int) -> str:
    parts = ["cronfleet", "chaos", "run", name, "--cycles", str(args.cycles), "--seed", str(seed)]
    for plant in args.plant:
        parts += ["--plant", plant]
    if args.target:
        parts += ["--target", args.target]
    return shlex.join(parts)


def _print_result(result) -> None:  # type: ignore[no-untyped-def]
    a = result.audit.summary() if result.audit else None
    verdict = "passed" if result.passed else "FAILED"
    if a is None:
        line = f"{result.drill}: {verdict}: {result.error}"
    else:
        line = (
            f"{result.drill}: {verdict}: expected {a['expected']}, lost {a['lost']}, "
            f"duplicate effects {a['duplicate_effects']}, "
            f"stale writes {a['stale_writes_accepted']}, "
            f"overlapping executions {a['overlapping_executions']}, "
            f"started twice in short stalls {a['started_twice_in_short_stalls']}, "
            f"unexpected {a['unexpected_effects'] + a['unexpected_runs']}, duplicate deliveries "
            f"{a['duplicate_deliveries']}, recovery median {a['recover_s_median']} s max "
            f"{a['recover_s_max']} s ({result.wall_s:.0f} s; {result.out}/report.md)"
        )
        if result.error:
            line += f"; error: {result.error}"
    print(line, flush=True)
