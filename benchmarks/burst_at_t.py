"""Which worker thread holds the interpreter lock in the burst's first second (issue 8:
why the kit's starts come in clumps the model does not have; docs/sim-storm.md).

Runs the life-of-a-run burst and, from about T - 0.3 s (py-spy takes ~0.1 s to attach)
for 1 s, samples every worker with py-spy at 1,000 Hz, keeping only the thread that holds
the GIL (`--gil`). Per worker it prints the samples per thread (a sample nobody holds the
GIL in is not counted: the process is in native code with the lock released, or off the
core) and the hottest frames of each thread.

    /work/tools/quiet python benchmarks/burst_at_t.py --out /tmp/burst-at-t

py-spy pauses the process for each sample (torn stacks would blur the attribution), so
the worker runs slower than unobserved: read the figures as shares, not times.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DUE = re.compile(r"due (\S+ \S+) \(")
SLOT_S = 0.01


def worker_pids(prefix: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"worker --topic-prefix {prefix}"], capture_output=True)
    return sorted(int(p) for p in out.stdout.split())


def by_thread(path: Path) -> dict[str, Counter[str]]:
    """Samples per thread and leaf frame (with its nearest kit frame), from py-spy raw."""
    threads: dict[str, Counter[str]] = defaultdict(Counter)
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or not stack:
            continue
        frames = stack.split(";")
        thread, leaf = frames[0], frames[-1]
        kit = next((f for f in reversed(frames) if "/kit/" in f), leaf)
        threads[thread][leaf if kit == leaf else f"{leaf} <- {kit}"] += int(n)
    return threads


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
    due: datetime | None = None
    log = (args.out / "benchmark.log").open("w")
    for line in bench.stdout:
        log.write(line)
        print(line, end="")
        if (m := DUE.search(line)) is not None:
            due = datetime.fromisoformat(m.group(1))
            break
    if due is None:
        sys.exit("the benchmark did not say when T is")
    time.sleep(max(0.0, due.timestamp() - 0.4 - time.time()))
    pids = worker_pids("cf_bench_life")
    spies = {}
    for pid in pids:
        path = args.out / f"pyspy-worker-{pid}.txt"
        spies[pid] = (
            subprocess.Popen(
                [
                    *("py-spy", "record", "-p", str(pid), "-r", "1000", "-d", "1", "--gil"),
                    *("--threads", "-f", "raw", "-o", str(path)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
            path,
            time.time() - due.timestamp(),
        )
    for line in bench.stdout:
        log.write(line)
        print(line, end="")
    bench.wait()
    for pid, (spy, path, began) in spies.items():
        spy.wait(timeout=60)
        if not path.exists():
            print(f"worker {pid}: no profile")
            continue
        threads = by_thread(path)
        total = sum(sum(c.values()) for c in threads.values())
        print(f"\nworker {pid}: py-spy from T{began:+.3f} s for 1 s, {total} GIL samples")
        for thread, frames in sorted(threads.items(), key=lambda kv: -sum(kv[1].values())):
            print(f"  {sum(frames.values()):5d}  {thread}")
            for frame, n in frames.most_common(5):
                print(f"      {n:5d}  {frame[:140]}")


if __name__ == "__main__":
    main()
