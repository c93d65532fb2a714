"""Every sitting of the storm model against the kit, side by side: each sitting's
compared runs, their median p99 start lag, the model's prediction from that sitting's own
profile (and from a profile written before the sitting, where there is one), the error
and whether it is within issue 8's 15 %.

    python benchmarks/storm_sittings.py [--plot OUT.png] [DIR ...]

DIR defaults to every benchmarks/results/storm_2core/*/sitting*/ with a model_vs_kit.json
(written by benchmarks/storm_model.py --json); a model_pooled.json beside it is the
prediction of a profile fixed before that sitting ran (docs/sim-storm.md). One table,
one plot: the runs' spread within a sitting is as large as the band, which is why each
sitting's verdict is against the median of its runs.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT = "benchmarks/results/storm_2core/*/sitting*/"
BAND = 0.15


@dataclass(frozen=True)
class Sitting:
    name: str  # date/sitting
    runs: list[float]  # compared runs' p99 start lag (s)
    median: float
    model: float  # the sitting's own profile
    written_before: float | None  # a profile fixed before the sitting ran, if any

    def error(self, predicted: float) -> float:
        return predicted / self.median - 1


def read_sitting(path: Path) -> Sitting:
    """A sitting from storm_model.py's JSON; the median is recomputed from the runs, so a
    JSON whose summary disagrees with its runs fails here rather than in the table."""
    d = json.loads((path / "model_vs_kit.json").read_text())
    runs = sorted(c["measured_p99_s"] for c in d["compared"])
    if not runs:
        raise ValueError(f"{path}: no compared runs")
    median = statistics.median(runs)
    if abs(median - d["measured_median_p99_s"]) > 1e-9:
        raise ValueError(
            f"{path}: measured_median_p99_s {d['measured_median_p99_s']} is not "
            f"the median of its runs ({median})"
        )
    pooled = path / "model_pooled.json"
    before = json.loads(pooled.read_text())["model_median_p99_s"] if pooled.exists() else None
    name = f"{path.parent.name}/{path.name}"
    return Sitting(name, runs, median, d["model_median_p99_s"], before)


def table(sittings: list[Sitting]) -> list[str]:
    def verdict(err: float) -> str:
        return "yes" if abs(err) <= BAND else "NO"

    out = [
        f"{'sitting':<34}{'runs':>5}  {'p99 range (s)':<14}{'median':>8}{'model':>8}"
        f"{'error':>8}  within   {'written before':>14}{'error':>8}  within"
    ]
    for s in sittings:
        e = s.error(s.model)
        row = (
            f"{s.name:<34}{len(s.runs):>5}  {s.runs[0]:.3f}-{s.runs[-1]:.3f}   {s.median:8.3f}"
            f"{s.model:8.3f}{e:+8.1%}  {verdict(e):<6}"
        )
        if s.written_before is not None:
            b = s.error(s.written_before)
            row += f"   {s.written_before:14.3f}{b:+8.1%}  {verdict(b)}"
        out.append(row)
    return out


def plot(sittings: list[Sitting], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(sittings) + 2), 4.5))
    for i, s in enumerate(sittings):
        ax.scatter(
            [i] * len(s.runs),
            s.runs,
            s=14,
            color="0.55",
            zorder=2,
            label="a compared run" if i == 0 else None,
        )
        ax.plot(
            [i - 0.3, i + 0.3],
            [s.median] * 2,
            color="black",
            lw=2,
            label="their median" if i == 0 else None,
        )
        ax.fill_between(
            [i - 0.3, i + 0.3],
            s.median * (1 - BAND),
            s.median * (1 + BAND),
            color="tab:green",
            alpha=0.15,
            label="median ± 15 %" if i == 0 else None,
        )
        ax.scatter(
            [i],
            [s.model],
            marker="D",
            color="tab:blue",
            zorder=3,
            label="model, the sitting's own profile" if i == 0 else None,
        )
        if s.written_before is not None:
            ax.scatter(
                [i],
                [s.written_before],
                marker="x",
                s=60,
                color="tab:red",
                zorder=3,
                label="model, profile written before the sitting",
            )
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    ax.legend(seen.values(), seen.keys(), fontsize=8, loc="upper right")
    ax.set_xticks(range(len(sittings)), [s.name.replace("/", "\n") for s in sittings], fontsize=7)
    ax.set_ylabel("p99 start lag (s)")
    ax.set_ylim(bottom=0)
    ax.set_title("50,000 runs due at one second on 2 cores: the kit's runs and the model")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*")
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args()
    dirs = [Path(p) for p in (args.dirs or sorted(glob.glob(DEFAULT)))]
    dirs = [d for d in dirs if (d / "model_vs_kit.json").exists()]
    if not dirs:
        print("no sittings with a model_vs_kit.json (benchmarks/storm_model.py --json)")
        return 2
    sittings = [read_sitting(d) for d in dirs]
    print("\n".join(table(sittings)))
    if args.plot:
        plot(sittings, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
