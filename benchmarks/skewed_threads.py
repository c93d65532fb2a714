"""What libfaketime costs a threaded Python process (the drills' skewed worker and node,
chaos.skew): three threads counting while a fourth wakes every 10 ms, as a worker's fence
loop does, run plain, under libfaketime with its forced monotonic fix (its default on
this glibc) and with the fix off (what chaos.skew sets). Every run of every arm printed.

    python benchmarks/skewed_threads.py [--rounds 3] [--seconds 3] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from series_report import every_run, write_rows

from chaos.skew import libfaketime_path

PROBE = """
import json, sys, threading, time
seconds = float(sys.argv[1])
counts = [0, 0, 0]
stop = False
def work(i):
    x = 0
    while not stop:
        for _ in range(1000):
            x += 1
        counts[i] += 1
threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
cpu = time.process_time()
for t in threads:
    t.start()
tick, worst, last = threading.Event(), 0.0, time.monotonic()
end = last + seconds
while time.monotonic() < end:
    tick.wait(0.01)
    now = time.monotonic()
    worst, last = max(worst, now - last), now
stop = True
for t in threads:
    t.join()
print(json.dumps({"work_per_s": sum(counts) / seconds,
                  "cpu_cores": (time.process_time() - cpu) / seconds,
                  "worst_wake_gap_ms": worst * 1000}))
"""


def arm(name: str, lib: str, stamp: Path) -> dict[str, str]:
    if name == "plain":
        return {}
    env = {
        "LD_PRELOAD": lib,
        "FAKETIME_TIMESTAMP_FILE": str(stamp),
        "FAKETIME_CACHE_DURATION": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    if name == "faketime, fix off":
        env["FAKETIME_FORCE_MONOTONIC_FIX"] = "0"
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    lib = libfaketime_path()
    if lib is None:
        raise SystemExit("libfaketime not found (apt-get install libfaketime)")
    arms = ["plain", "faketime, default", "faketime, fix off"]
    rows = []
    print(
        f"# python benchmarks/skewed_threads.py --rounds {args.rounds} --seconds {args.seconds:g}"
    )
    print(f"{'round':>5}  {'arm':<18}  {'work/s':>8}  {'cpu cores':>9}  {'worst wake gap ms':>17}")
    with tempfile.TemporaryDirectory() as tmp:
        stamp = Path(tmp) / "clock"
        stamp.write_text("+0.000s\n")
        for n in range(1, args.rounds + 1):
            for name in arms:
                done = subprocess.run(
                    [sys.executable, "-c", PROBE, str(args.seconds)],
                    env=os.environ | arm(name, lib, stamp),
                    capture_output=True, text=True, check=True, timeout=120,
                )  # fmt: skip
                row = {"round": n, "arm": name, **json.loads(done.stdout)}
                rows.append(row)
                print(f"{n:>5}  {name:<18}  {row['work_per_s']:>8.0f}  {row['cpu_cores']:>9.2f}"
                      f"  {row['worst_wake_gap_ms']:>17.0f}", flush=True)  # fmt: skip
    for name in arms:
        work = [r["work_per_s"] for r in rows if r["arm"] == name]
        print(every_run(f"{name}: work/s", work, ".0f"))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
