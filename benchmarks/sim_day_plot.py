"""Plot the progress lines of `benchmarks/sim_day.py` runs (wall time and resident
memory against simulated time), one line per run log, plus a table of their figures.

    python benchmarks/sim_day_plot.py OUT.png RUN.log [RUN.log ...]
"""

from __future__ import annotations

import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

LINE = re.compile(
    r"sim\s+(-?[\d.]+) h\s+wall\s+([\d.]+) s\s+runs done\s+([\d.]+) M\s+held\s+([\d.]+) M"
    r"\s+RSS\s+([\d.]+) GB"
)


def main() -> int:
    out, logs = sys.argv[1], sys.argv[2:]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for path in logs:
        with open(path) as fh:
            rows = [tuple(map(float, m.groups())) for m in map(LINE.search, fh) if m]
        h = [r[0] for r in rows]
        ax1.plot(h, [r[1] for r in rows], label=path.rsplit("/", 1)[-1])
        ax2.plot(h, [r[4] for r in rows], label=path.rsplit("/", 1)[-1])
    ax1.set_xlabel("simulated hours")
    ax1.set_ylabel("wall time (s)")
    ax1.set_title("Wall time")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("simulated hours")
    ax2.set_ylabel("resident memory (GB)")
    ax2.set_ylim(bottom=0)
    ax2.set_title("Resident memory (sampled hourly)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
