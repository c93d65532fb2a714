"""The end of a benchmark series shared by the scripts that run one: each arm's median
with every run beside it (the machines are noisy: no run is left out), and the rows as
JSON for the results directory."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def every_run(label: str, values: Sequence[float], fmt: str = ".2f") -> str:
    """`label: median M (every run: a, b, c)`."""
    runs = ", ".join(format(v, fmt) for v in values)
    return f"{label}: median {format(statistics.median(values), fmt)} (every run: {runs})"


def write_rows(path: Path | None, rows: list[dict[str, Any]]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"rounds": rows}, indent=2) + "\n")
