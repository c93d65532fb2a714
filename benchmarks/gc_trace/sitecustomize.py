"""Put this directory on PYTHONPATH and every Python process started with it (a benchmark
and the kit's services it spawns) appends each cyclic-GC collection longer than 1 ms to
GCTRACE_DIR/<pid>.txt: wall time at its end, duration, generation, objects collected.
`python benchmarks/gc_pauses.py GCTRACE_DIR --at T` reads them (docs/sim-storm.md)."""

import gc
import os
import sys
import time
from typing import Any, TextIO

_began = [0.0]
_out: list[TextIO] = []


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _began[0] = time.perf_counter()
        return
    took = time.perf_counter() - _began[0]
    if took <= 0.001:
        return
    if not _out:
        folder = os.environ.get("GCTRACE_DIR", "/tmp/gctrace")
        os.makedirs(folder, exist_ok=True)
        _out.append(open(f"{folder}/{os.getpid()}.txt", "a", buffering=1))  # noqa: SIM115
        _out[0].write("# " + " ".join(sys.argv)[:200] + "\n")
    _out[0].write(f"{time.time():.3f} {took:.4f} {info['generation']} {info['collected']}\n")


gc.callbacks.append(_on_gc)
