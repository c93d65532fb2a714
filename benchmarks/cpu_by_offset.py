"""The machine's CPU by where in the wall second it is spent, process by process: for
SECONDS, every 50 ms, each process's CPU ticks (/proc/PID/stat) since the last look,
put in the bin of the second it fell in, then each bin's average in cores. A fleet whose
runs are all due at whole seconds (the soak's) does most of its work just after them:
this shows who competes with the starts then. Processes are named by their cronfleet
service (`worker w1`, `scheduler sched-a`, `api`, ...) or by their command's name.

    python benchmarks/cpu_by_offset.py [--seconds 60] [--top 10] [--json OUT.json]

Ticks are the kernel's (USER_HZ, 10 ms here), so each bin is an average of many seconds
or noise: use 60 s or more.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from pathlib import Path

BIN_S = 0.05
BINS = int(1 / BIN_S)
HZ = os.sysconf("SC_CLK_TCK")
SERVICES = ("worker", "scheduler", "reaper", "api")


def name_of(argv: list[str], comm: str) -> str:
    """`worker w1` for `kit.cli worker --worker-id w1`; else the program's own name."""
    for i, arg in enumerate(argv):
        if arg in SERVICES and i > 0 and argv[i - 1].endswith(("kit.cli", "cronfleet")):
            for flag in ("--worker-id", "--node-id"):
                if flag in argv[i:]:
                    return f"{arg} {argv[argv.index(flag, i) + 1]}"
            return arg
    if "chaos" in argv and ("soak" in argv or "run" in argv):
        return "chaos harness"
    return comm


def snapshot() -> dict[int, tuple[int, str]]:
    """Each process's user + system ticks so far, and its name."""
    seen = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seen[int(entry.name)] = (int(fields[11]) + int(fields[12]), name_of(argv, comm))
    return seen


def measure(seconds: float) -> list[Counter[str]]:
    """Ticks by process name, per bin of the second."""
    bins: list[Counter[str]] = [Counter() for _ in range(BINS)]
    before, at = snapshot(), time.time()
    end = at + seconds
    while at < end:
        time.sleep(BIN_S - time.time() % BIN_S)
        now_ticks, now = snapshot(), time.time()
        b = int(((at + now) / 2 % 1) / BIN_S) % BINS
        for pid, (ticks, name) in now_ticks.items():
            spent = ticks - before.get(pid, (ticks, name))[0]
            if spent > 0:
                bins[b][name] += spent
        before, at = now_ticks, now
    return bins


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--top", type=int, default=10, help="processes shown, by CPU")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    print(f"# python benchmarks/cpu_by_offset.py --seconds {args.seconds:g} --top {args.top}")
    bins = measure(args.seconds)
    total: Counter[str] = Counter()
    for b in bins:
        total.update(b)
    names = [n for n, _ in total.most_common(args.top)]
    per_bin_s = args.seconds / BINS  # seconds of wall time each bin saw
    rows = []
    print(f"cores by {BIN_S * 1000:.0f} ms of the second, averaged over {args.seconds:g} s")
    print(f"{'ms':>4} " + " ".join(f"{n[:12]:>12}" for n in names) + f" {'all':>6}")
    for i, b in enumerate(bins):
        cores = {n: round(b[n] / HZ / per_bin_s, 3) for n in names}
        every = round(sum(b.values()) / HZ / per_bin_s, 3)
        rows.append({"from_ms": int(i * BIN_S * 1000), "cores": cores, "all": every})
        print(f"{i * BIN_S * 1000:>4.0f} " + " ".join(f"{cores[n]:>12.2f}" for n in names)
              + f" {every:>6.2f}")  # fmt: skip
    mean = sum(r["all"] for r in rows) / BINS
    print(f"mean {mean:.2f} cores")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"seconds": args.seconds, "bins": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
