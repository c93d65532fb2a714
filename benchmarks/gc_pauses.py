"""Cyclic-GC pauses of each process around an instant T, from benchmarks/gc_trace.

    PYTHONPATH=benchmarks/gc_trace GCTRACE_DIR=/tmp/gct python benchmarks/life_of_a_run.py \\
        --mode burst --jobs 50000 --workers 2 --concurrency 1024 --out /tmp/gct-out
    python benchmarks/gc_pauses.py /tmp/gct --at 2026-12-01T04:00:40Z   # T: the burst's second

Prints per process the collections over 1 ms (count, total, longest) and each one over
`--min-ms` from `--before` seconds before T to `--after` after it.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--at", required=True, help="T, ISO 8601 with a zone")
    ap.add_argument("--before", type=float, default=12.0)
    ap.add_argument("--after", type=float, default=3.0)
    ap.add_argument("--min-ms", type=float, default=5.0)
    args = ap.parse_args()
    t = datetime.fromisoformat(args.at.replace("Z", "+00:00")).timestamp()
    for path in sorted(args.folder.glob("*.txt")):
        lines = path.read_text().splitlines()
        argv = lines[0].lstrip("# ").split()
        name = next((a for a in argv[1:] if not a.startswith("-")), argv[0] if argv else "?")
        events = [(float(e), float(d), g, c) for e, d, g, c in (x.split() for x in lines[1:])]
        if not events:
            continue
        took_all = [d for _, d, _, _ in events]
        print(
            f"{path.stem} {name}: {len(events)} collections > 1 ms, "
            f"{sum(took_all):.3f} s in all, longest {max(took_all) * 1000:.0f} ms"
        )
        for end, took, gen, collected in events:
            began = end - took - t
            if -args.before <= began <= args.after and took * 1000 >= args.min_ms:
                print(
                    f"    T{began:+.3f} s  {took * 1000:5.0f} ms  gen {gen}  collected {collected}"
                )


if __name__ == "__main__":
    main()
