"""Where each worker thread's time goes in the burst's first second (issue 8: why the
kit's starts come in clumps the model does not have; docs/sim-storm.md).

Runs the life-of-a-run burst; 3 s before T it names every worker thread (`py-spy dump`
gives the OS thread id of each Python thread); from T - 0.2 s to T + 0.6 s it reads each
thread's /proc schedstat every 5 ms: time on a core, and time runnable but waiting for a
core (the run queue). A thread that neither runs nor waits for a core is asleep or
blocked: on a lock, on I/O, or on the interpreter lock (a GIL wait is a futex sleep).
Per worker it prints 20 ms slots: the hold thread's time on a core, its run-queue wait,
and the other threads' time on a core (which of them), then the totals from T to T + 0.3 s.

    scripts/quiet python benchmarks/burst_at_t.py --out /tmp/burst-at-t

Reading /proc costs the sampler, not the workers (no ptrace, no pause).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DUE = re.compile(r"due (\S+ \S+) \(")
THREAD = re.compile(r'Thread (\d+) \([^)]*\): "([^"]+)"')
SLOT_S = 0.02


def worker_pids() -> list[int]:
    out = subprocess.run(
        ["pgrep", "-f", "worker --topic-prefix cf_bench_life"], capture_output=True
    )
    return sorted(int(p) for p in out.stdout.split())


def thread_names(pid: int) -> dict[int, str]:
    out = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True)
    return {int(tid): name for tid, name in THREAD.findall(out.stdout)}


def schedstat(pid: int, tid: int) -> tuple[int, int] | None:
    """(ns on a core, ns runnable waiting for one) so far."""
    try:
        on, wait, _ = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return None
    return int(on), int(wait)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=50_000)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bench = subprocess.Popen(
        [
            *(sys.executable, "-u", "benchmarks/life_of_a_run.py", "--mode", "burst"),
            *("--jobs", str(args.jobs), "--workers", "2", "--concurrency", "1024"),
            *("--out", str(args.out)),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert bench.stdout is not None
    log = (args.out / "benchmark.log").open("w")
    due: datetime | None = None
    for line in bench.stdout:
        log.write(line)
        print(line, end="")
        if (m := DUE.search(line)) is not None:
            due = datetime.fromisoformat(m.group(1))
            break
    if due is None:
        sys.exit("the benchmark did not say when T is")
    t = due.timestamp()
    time.sleep(max(0.0, t - 3 - time.time()))
    names = {pid: thread_names(pid) for pid in worker_pids()}
    time.sleep(max(0.0, t - 0.2 - time.time()))
    samples: list[tuple[float, int, int, int, int]] = []  # (s from T, pid, tid, on, wait)
    while (now := time.time()) < t + 0.6:
        for pid, threads in names.items():
            for tid in threads:
                if (s := schedstat(pid, tid)) is not None:
                    samples.append((now - t, pid, tid, *s))
        time.sleep(0.005)
    for line in bench.stdout:
        log.write(line)
        print(line, end="")
    bench.wait()
    for pid, threads in names.items():
        report(pid, threads, [s for s in samples if s[1] == pid])


def report(
    pid: int, threads: dict[int, str], samples: list[tuple[float, int, int, int, int]]
) -> None:
    """Per 20 ms slot: ms on a core and ms waiting for one, per thread."""
    by_tid: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
    for at, _, tid, on, wait in samples:
        by_tid[tid].append((at, on, wait))
    slots: dict[int, dict[int, tuple[float, float]]] = defaultdict(dict)
    totals: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for tid, rows in by_tid.items():
        for (a0, on0, w0), (_, on1, w1) in pairwise(rows):
            slot = int((a0 + 0.2) / SLOT_S)
            on_ms, wait_ms = (on1 - on0) / 1e6, (w1 - w0) / 1e6
            prev = slots[slot].get(tid, (0.0, 0.0))
            slots[slot][tid] = (prev[0] + on_ms, prev[1] + wait_ms)
            if 0 <= a0 < 0.3:
                totals[tid][0] += on_ms
                totals[tid][1] += wait_ms
    hold = next((tid for tid, n in threads.items() if n == "hold"), None)
    print(f"\nworker {pid}: threads {sorted(set(threads.values()))}")
    print("  slot      hold on-core / run-queue ms   others on-core ms (busiest)")
    for slot in sorted(slots):
        at = slot * SLOT_S - 0.2
        row = slots[slot]
        h_on, h_wait = row.get(hold, (0.0, 0.0)) if hold is not None else (0.0, 0.0)
        others = {tid: v[0] for tid, v in row.items() if tid != hold}
        busiest = max(others, key=lambda k: others[k]) if others else None
        name = threads.get(busiest, "?") if busiest is not None else "-"
        print(
            f"  T{at:+.2f}   {h_on:5.1f} / {h_wait:5.1f}             {sum(others.values()):5.1f}"
            f" ({name} {others.get(busiest, 0.0):.1f})"
        )
    print("  T..T+0.3 s, ms on a core / waiting for one, per thread:")
    for tid, (on, wait) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        if on + wait >= 0.5:
            print(f"    {threads.get(tid, tid)!s:>24}  {on:6.1f} / {wait:6.1f}")


if __name__ == "__main__":
    main()
