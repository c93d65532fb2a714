"""A tenant over its API rate beside another: does anything but the noisy tenant slow down?

One `cronfleet api` process whose tenant policy holds tenant A to `--limit` requests/s
(burst the same). Tenant B (10 Locust users, 100 calls/s in all, the `noisy` suite's B)
reads its jobs in three arms, alternated round by round:

- `alone`: B only;
- `a_within`: A lists its jobs at `--within-rate` calls/s, under its limit (every answer
  200): the load a well-behaved A puts on the API;
- `a_over`: A at `--over-rate` calls/s, ten times its limit (most answers 429).

A runs in a Locust process of its own, so that its load generator does not delay B's
measurement inside B's process (in production A's clients are not B's), and at niceness
`--a-nice` (19 by default): on a 2-core machine its generator otherwise takes CPU from
the API process and B's generator alike, and that is the harness's cost, not the
kit's (A still reaches its rate: its answers are counted). What the limit
is answerable for is `a_over` against `a_within`: the refusals' cost; `a_within` against
`alone` is A's allowed traffic, which the limit does not and should not take away.

    python benchmarks/api_rate.py --rounds 3 --run-time 60 --json OUT/api_rate.json \\
        --plot docs/plots/api_rate.png

Every run's figures go to --json; the table of every run is printed at the end (and by
`--report`).

`--cpu-per-call N` measures instead what one call costs the API process, in CPU: N calls
of B's list (served) and N of A's (refused, 429), over 4 keep-alive connections as fast
as they are answered, alternated three times:

    python benchmarks/api_rate.py --cpu-per-call 3000 --json OUT/api_cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from api_speed import REPO, free_port, migrate_stack, serve, stop

sys.path.insert(0, str(REPO))
from loadtest.common import percentile as _p

ARMS = ("alone", "a_within", "a_over")
NOISY_TENANT = "lt-noisy"


def locust(port: int, out: Path, run_time_s: int, *args: str, nice: int = 0) -> subprocess.Popen:
    argv = ["nice", "-n", str(nice)] if nice else []
    argv += [sys.executable, "-m", "loadtest", "noisy", "--host", f"http://127.0.0.1:{port}"]
    argv += ["--out", str(out), "--run-time", f"{run_time_s}s", "--loglevel", "WARNING"]
    return subprocess.Popen(
        [*argv, "--noisy-tenant", NOISY_TENANT, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def api_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(out: Path, proc: subprocess.Popen, timeout_s: float) -> dict[str, Any]:
    text, _ = proc.communicate(timeout=timeout_s)
    path = out / "summary.json"
    if not path.exists():
        raise RuntimeError(f"{out.name}: no summary (exit {proc.returncode}): {text[-2000:]}")
    data = json.loads(path.read_text())
    data["exit_code"] = proc.returncode
    return data


def run_arm(args: argparse.Namespace, port: int, api_pid: int, arm: str, out: Path) -> dict:
    """One arm: B's Locust (and A's, but for `alone`) for --run-time; B's figures, A's
    answers by status and the API process's CPU over the arm."""
    a = None
    if arm != "alone":
        rate = args.within_rate if arm == "a_within" else args.over_rate
        within = ["--noisy-within-limit"] if arm == "a_within" else []
        a = locust(
            port,
            out / "a",
            args.run_time + 5,  # A runs through B's setup and measure
            *("--calm-users", "0", "--noisy-users", str(args.noisy_users)),
            *("--noisy-rate", f"{rate:g}", *within),
            nice=args.a_nice,
        )
        time.sleep(2)  # A at its pace before B starts measuring
    cpu0 = api_cpu_s(api_pid)
    t0 = time.monotonic()
    b = locust(
        port,
        out / "b",
        args.run_time,
        *("--calm-users", "10", "--calm-rate", "100", "--noisy-users", "0"),
    )
    b_sum = summary(out / "b", b, args.run_time + 300)
    cpu = api_cpu_s(api_pid) - cpu0
    wall = time.monotonic() - t0
    a_sum = summary(out / "a", a, args.run_time + 300) if a is not None else None
    return {
        "arm": arm,
        "b_requests": b_sum["calm_requests"],
        "b_p50_ms": round(b_sum["calm_p50_ms"], 2),
        "b_p99_ms": round(b_sum["calm_p99_ms"], 2),
        "b_errors": b_sum["calm_errors"],
        "a_statuses": a_sum["noisy_statuses"] if a_sum else {},
        "a_passed": a_sum["passed"] if a_sum else None,
        "b_passed": b_sum["passed"],
        "api_cpu_s": round(cpu, 2),
        "wall_s": round(wall, 1),
    }


def start_api(limit: float) -> tuple[subprocess.Popen, int, Path]:
    migrate_stack()
    work = Path(tempfile.mkdtemp(prefix="api_rate-"))
    policy = work / "tenants.toml"
    policy.write_text(
        f"[tenants.{NOISY_TENANT}]\napi_rate_per_s = {limit:g}\napi_burst = {limit:g}\n"
    )
    os.environ["CRONFLEET_TENANT_POLICY_FILE"] = str(policy)
    port = free_port()
    return serve(None, 1, port, work / "api.log"), port, work


def _list_request(token: str) -> bytes:
    return (
        f"GET /v1/jobs?limit=50 HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {token}\r\n\r\n"
    ).encode()


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> str:
    """Send one request on a keep-alive connection and read its whole answer: its status."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    return head.split()[1].decode()


async def _calls(port: int, token: str, n: int, connections: int = 4) -> dict[str, int]:
    """n GET /v1/jobs over `connections` keep-alive connections, each call sent when the
    last one's answer is read; the answers by status."""
    request = _list_request(token)

    async def one(k: int) -> dict[str, int]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        seen: dict[str, int] = {}
        for _ in range(k):
            status = await _exchange(reader, writer, request)
            seen[status] = seen.get(status, 0) + 1
        writer.close()
        return seen

    total: dict[str, int] = {}
    for seen in await asyncio.gather(*(one(n // connections) for _ in range(connections))):
        for status, count in seen.items():
            total[status] = total.get(status, 0) + count
    return total


def cpu_per_call(args: argparse.Namespace) -> list[dict[str, Any]]:
    """API CPU per served call (B's list) and per refused one (A's, over its limit)."""
    sys.path.insert(0, str(REPO))
    from kit.settings import load_settings
    from kit.store.db import engine_for
    from kit.store.tokens import token_create

    api, port, _ = start_api(1)  # A: 1 call/s, so nearly all of its calls are refused
    engine = engine_for(load_settings().database_url, pool_size=1)
    try:
        tokens = {
            "served": token_create(engine, "lt-calm", ("read",)).token,
            "refused": token_create(engine, NOISY_TENANT, ("read",)).token,
        }
    finally:
        engine.dispose()
    rows: list[dict[str, Any]] = []
    try:
        asyncio.run(_calls(port, tokens["served"], 200))  # warm: imports, pool, caches
        for rnd in range(1, 4):
            for kind, token in tokens.items():
                before = api_cpu_s(api.pid)
                t0 = time.monotonic()
                answers = asyncio.run(_calls(port, token, args.cpu_per_call))
                cpu = api_cpu_s(api.pid) - before
                row = {
                    "round": rnd,
                    "calls": kind,
                    "answers": answers,
                    "api_cpu_us_per_call": round(1e6 * cpu / args.cpu_per_call),
                    "wall_s": round(time.monotonic() - t0, 2),
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
                Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    finally:
        stop(api)
    return rows


def series(args: argparse.Namespace) -> list[dict[str, Any]]:
    api, port, work = start_api(args.limit)
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(1, args.rounds + 1):
            for arm in ARMS:
                print(f"round {rnd}/{args.rounds}: {arm} ({args.run_time} s)", flush=True)
                row = run_arm(args, port, api.pid, arm, work / f"{rnd}-{arm}")
                rows.append({"round": rnd, **row})
                Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    finally:
        stop(api)
    return rows


SETTLE_S = 3.0  # the first seconds of a slot are not counted: A's rate is changing


def drive_a(schedule_path: str) -> None:
    """A's calls by the schedule's slots, each at its rate (0: none), paced over 4
    keep-alive connections; its answers by status per slot, written to the schedule's
    `out`. Run as a process of its own (`--drive-a`), niced like A's Locust."""
    plan = json.loads(Path(schedule_path).read_text())
    request = _list_request(plan["token"])
    counts: list[dict[str, int]] = [{} for _ in plan["slots"]]
    connections = 4

    async def one(lane: int) -> None:
        for k, (start, end, rate) in enumerate(plan["slots"]):
            if rate <= 0:
                continue
            # a connection per slot: the server closes one left idle through a slot of none
            reader, writer = await asyncio.open_connection("127.0.0.1", plan["port"])
            gap = connections / rate
            at = start + lane * gap / connections
            while at < end:
                await asyncio.sleep(max(0.0, at - time.time()))
                status = await _exchange(reader, writer, request)
                counts[k][status] = counts[k].get(status, 0) + 1
                at += gap
            writer.close()

    async def lanes() -> None:
        await asyncio.gather(*(one(i) for i in range(connections)))

    asyncio.run(lanes())
    Path(plan["out"]).write_text(json.dumps(counts))


def interleaved(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One B Locust run throughout, A switched between the three arms every `--slot-s`
    seconds, each cycle's order shuffled (seeded): the machine's drift over minutes then
    falls on every arm alike, and each arm's p99 is read from all its slots together."""
    sys.path.insert(0, str(REPO))
    from kit.settings import load_settings
    from kit.store.db import engine_for
    from kit.store.tokens import token_create

    api, port, work = start_api(args.limit)
    engine = engine_for(load_settings().database_url, pool_size=1)
    try:
        a_token = token_create(engine, NOISY_TENANT, ("read",)).token
    finally:
        engine.dispose()
    rng = random.Random(args.seed)
    rates = {"alone": 0.0, "a_within": args.within_rate, "a_over": args.over_rate}
    t0 = time.time() + args.lead_s  # B's users make their jobs first
    slots: list[tuple[int, str, float, float]] = []
    for cycle in range(1, args.interleaved + 1):
        for arm in rng.sample(ARMS, len(ARMS)):
            start = t0 + len(slots) * args.slot_s
            slots.append((cycle, arm, start, start + args.slot_s))
    total_s = slots[-1][3] - time.time()
    plan = work / "a_plan.json"
    plan.write_text(
        json.dumps(
            {
                "port": port,
                "token": a_token,
                "out": str(work / "a_counts.json"),
                "slots": [(s, e, rates[arm]) for _, arm, s, e in slots],
            }
        )
    )
    log = work / "b_calls.json"
    b = locust(
        port,
        work / "b",
        math.ceil(total_s) + 3,
        *("--calm-users", "10", "--calm-rate", "100", "--noisy-users", "0"),
        *("--calm-log", str(log)),
    )
    nice = ["nice", "-n", str(args.a_nice)] if args.a_nice else []
    a = subprocess.Popen([*nice, sys.executable, __file__, "--drive-a", str(plan)], cwd=REPO)
    cpu: list[float] = []
    try:
        for k, (cycle, arm, start, _end) in enumerate(slots):
            time.sleep(max(0.0, start - time.time()))
            cpu.append(api_cpu_s(api.pid))
            print(f"cycle {cycle}/{args.interleaved}: slot {k + 1}/{len(slots)} {arm}", flush=True)
        time.sleep(max(0.0, slots[-1][3] - time.time()))
        cpu.append(api_cpu_s(api.pid))
        summary(work / "b", b, 300)
        a.wait(timeout=120)
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.kill()
        stop(api)
    calls = json.loads(log.read_text())
    counts = json.loads((work / "a_counts.json").read_text())
    rows = []
    for k, (cycle, arm, start, end) in enumerate(slots):
        mine = [(ms, failed) for at, ms, failed in calls if start + SETTLE_S <= at < end]
        ms = [m for m, _ in mine]
        rows.append(
            {
                "round": cycle,
                "arm": arm,
                "b_requests": len(ms),
                "b_p50_ms": round(_p(ms, 50), 2),
                "b_p99_ms": round(_p(ms, 99), 2),
                "b_errors": sum(1 for _, failed in mine if failed),
                "b_ms": [round(m, 2) for m in ms],
                "a_statuses": counts[k],
                "api_cpu_s": round(cpu[k + 1] - cpu[k], 2),
                "wall_s": args.slot_s,
            }
        )
    return rows


def pooled(rows: list[dict[str, Any]], resamples: int = 2000, seed: int = 7) -> str:
    """Each arm's p99 over all its slots' calls, and the ratios' 95 % interval from
    resampling whole cycles (a bootstrap: the cycles are the independent units)."""
    cycles = sorted({r["round"] for r in rows})
    by = {(r["round"], r["arm"]): r["b_ms"] for r in rows}

    def p99s(picked: list[int]) -> dict[str, float]:
        return {arm: _p([m for c in picked for m in by[(c, arm)]], 99) for arm in ARMS}

    point = p99s(cycles)
    rng = random.Random(seed)
    ratios: dict[str, list[float]] = {"a_over/alone": [], "a_over/a_within": []}
    for _ in range(resamples):
        got = p99s([rng.choice(cycles) for _ in cycles])
        ratios["a_over/alone"].append(got["a_over"] / got["alone"] - 1)
        ratios["a_over/a_within"].append(got["a_over"] / got["a_within"] - 1)
    lines = [
        "B p99 over every slot of an arm, ms: " + ", ".join(f"{a} {point[a]:.1f}" for a in ARMS)
    ]
    for name, values in ratios.items():
        a, b = name.split("/")
        lo, hi = _p(values, 2.5), _p(values, 97.5)
        lines.append(
            f"{name}: {point[a] / point[b] - 1:+.1%} (95 % interval {lo:+.1%} to {hi:+.1%})"
        )
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| round | arm | B calls | B p50 ms | B p99 ms | B errors | A's answers | API CPU s |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in rows:
        answers = ", ".join(f"{k}: {v:,}" for k, v in r["a_statuses"].items()) or "-"
        lines.append(
            f"| {r['round']} | {r['arm']} | {r['b_requests']:,} | {r['b_p50_ms']:.1f} | "
            f"{r['b_p99_ms']:.1f} | {r['b_errors']} | {answers} | {r['api_cpu_s']:.1f} |"
        )
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]]) -> str:
    """B's p99 with A over its limit against A within it, round by round (the same
    round's runs are minutes apart, the fairest pairs this machine gives)."""
    out = []
    for rnd in sorted({r["round"] for r in rows}):
        arms = {r["arm"]: r for r in rows if r["round"] == rnd}
        if {"a_within", "a_over"} <= set(arms):
            within, over = arms["a_within"]["b_p99_ms"], arms["a_over"]["b_p99_ms"]
            out.append(f"round {rnd}: B p99 over/within {over / within - 1:+.0%}")
    medians = {
        arm: statistics.median(r["b_p99_ms"] for r in rows if r["arm"] == arm)
        for arm in ARMS
        if any(r["arm"] == arm for r in rows)
    }
    lines = ["; ".join(out)] if out else []
    lines.append("B p99 median ms: " + ", ".join(f"{a} {m:.1f}" for a, m in medians.items()))
    if {"alone", "a_over"} <= set(medians):
        lines.append(f"a_over against alone: {medians['a_over'] / medians['alone'] - 1:+.0%}")
    if {"a_within", "a_over"} <= set(medians):
        lines.append(f"a_over against a_within: {medians['a_over'] / medians['a_within'] - 1:+.0%}")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    by = {(r["round"], r["arm"]): r["b_p99_ms"] for r in rows}
    for rnd in sorted({r["round"] for r in rows}):  # a round's (cycle's) arms, joined
        ax.plot(range(len(ARMS)), [by.get((rnd, a)) for a in ARMS], color="0.85", zorder=1)
    for i, arm in enumerate(ARMS):
        ys = [r["b_p99_ms"] for r in rows if r["arm"] == arm]
        ax.scatter([i] * len(ys), ys, label=arm, zorder=2)
        for rnd, y in zip((r["round"] for r in rows if r["arm"] == arm), ys, strict=True):
            ax.annotate(str(rnd), (i, y), textcoords="offset points", xytext=(6, -3))
        if rows and "b_ms" in rows[0]:  # interleaved: the arm's p99 over all its slots
            every = [m for r in rows if r["arm"] == arm for m in r["b_ms"]]
            ax.hlines(_p(every, 99), i - 0.25, i + 0.25, color="black", zorder=3)
    ax.set_xticks(range(len(ARMS)), ["B alone", "A within its limit", "A over its limit"])
    label = "each slot, its cycle; bar: all slots" if rows and "b_ms" in rows[0] else "each run"
    ax.set_ylabel("tenant B's p99 latency, ms")
    ax.set_ylim(bottom=0)
    ax.set_title(f"One API process: B's p99 beside tenant A ({label})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--run-time", type=int, default=60, help="seconds per arm")
    parser.add_argument("--limit", type=float, default=20, help="A's api_rate_per_s")
    parser.add_argument("--within-rate", type=float, default=16, help="A's calls/s within")
    parser.add_argument("--over-rate", type=float, default=200, help="A's calls/s over")
    parser.add_argument("--noisy-users", type=int, default=4)
    parser.add_argument(
        "--a-nice",
        type=int,
        default=19,
        help="niceness of A's load generator (0: as B's); A's clients are not on the "
        "API's machine in production",
    )
    parser.add_argument("--json", default="")
    parser.add_argument("--plot", default="")
    parser.add_argument("--report", action="store_true", help="table of --json only")
    parser.add_argument(
        "--cpu-per-call", type=int, default=0, help="N: API CPU per served and refused call"
    )
    parser.add_argument(
        "--interleaved", type=int, default=0, help="N cycles of the three arms in one B run"
    )
    parser.add_argument("--slot-s", type=float, default=30, help="seconds per arm, interleaved")
    parser.add_argument("--seed", type=int, default=1, help="the arms' order, interleaved")
    parser.add_argument(
        "--lead-s", type=float, default=20, help="B's setup before the first slot, interleaved"
    )
    parser.add_argument("--drive-a", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive_a:
        drive_a(args.drive_a)
        return
    if not args.json:
        parser.error("--json is required")
    if args.interleaved:
        rows = interleaved(args)
        # a row a line: each slot's thousands of latencies stay on the slot's line
        Path(args.json).write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
        print(table(rows))
        print(pooled(rows))
        if args.plot:
            plot(rows, Path(args.plot))
        print(
            f"command: python benchmarks/api_rate.py --interleaved {args.interleaved} "
            f"--slot-s {args.slot_s:g} --seed {args.seed} --limit {args.limit:g} --within-rate "
            f"{args.within_rate:g} --over-rate {args.over_rate:g} --a-nice {args.a_nice} "
            "--json JSON"
        )
        return
    if args.cpu_per_call:
        cpu_per_call(args)
        print(f"command: python benchmarks/api_rate.py --cpu-per-call {args.cpu_per_call}")
        return
    rows = json.loads(Path(args.json).read_text()) if args.report else series(args)
    print(table(rows))
    print(pooled(rows) if rows and "b_ms" in rows[0] else verdict(rows))
    if args.plot:
        plot(rows, Path(args.plot))
    if args.report:
        return
    print(
        f"command: python benchmarks/api_rate.py --rounds {args.rounds} --run-time "
        f"{args.run_time} --limit {args.limit:g} --within-rate {args.within_rate:g} "
        f"--over-rate {args.over_rate:g} --a-nice {args.a_nice} --json JSON"
    )


if __name__ == "__main__":
    main()
