"""Put this directory on PYTHONPATH with STARTTRACE_DIR set, and every worker process
(`kit.cli worker`) started with it appends, for each first attempt it starts, where the
time between the run's second and its start went, to STARTTRACE_DIR/<pid>.tsv:

    due (epoch s)  released  on_loop  first_step  connected  began  (seconds after due)

`released`: the hold thread handed the run over (`Worker._start`); `on_loop`: the task
loop took it (`TaskLoop._take`); `first_step`: its task's first step ran (`TaskLoop._one`:
after any wait for one of the loop's places and for the loop's turn); `connected`: an
http task had its connection and asked to begin (`Worker._begin_on_loop`); `began`: its
start was stamped (`Worker._began`, or after `_execute_inline`'s batch for inline tasks).
A phase the run did not pass through (a run started off the loop) is empty.
`python benchmarks/start_phases.py STARTTRACE_DIR` reads them. Every hook wraps the
kit's own method and changes nothing it does; the cost is a dict entry and a line per run.
"""

import os
import sys
import threading
import time
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import find_spec
from typing import Any

_TRACED = ("kit.worker.worker", "kit.worker.task_loop")
MARKS = ("released", "on_loop", "first_step", "connected")


def _install(worker_module: Any, loop_module: Any, folder: str) -> None:
    worker, loop = worker_module.Worker, loop_module.TaskLoop
    start, take, one = worker._start, loop._take, loop._one
    begin_on_loop, began, inline = worker._begin_on_loop, worker._began, worker._execute_inline
    os.makedirs(folder, exist_ok=True)
    out = open(f"{folder}/{os.getpid()}.tsv", "a", buffering=1 << 16)  # noqa: SIM115
    lock = threading.Lock()
    marks: dict[str, dict[str, float]] = {}  # run id -> mark -> instant

    def mark(entry: Any, name: str) -> None:
        found = marks.get(getattr(getattr(entry, "run", None), "run_id", ""))
        if found is not None:
            found[name] = time.time()

    def write(entry: Any, at: float) -> None:
        run = entry.run
        found = marks.pop(run.run_id, None)
        if found is None or run.attempt != 1:
            return
        due = run.scheduled_at.timestamp()
        cells = [f"{found[m] - due:.4f}" if m in found else "" for m in MARKS]
        with lock:
            out.write("\t".join([f"{due:.3f}", *cells, f"{at - due:.4f}"]) + "\n")

    def _start(self: Any, due: list[Any]) -> None:
        now = time.time()
        for entry in due:
            marks[entry.run.run_id] = {"released": now}
        start(self, due)

    def _take(self: Any, entries: list[Any]) -> None:
        for entry in entries:
            mark(entry, "on_loop")
        take(self, entries)

    async def _one(self: Any, entry: Any) -> None:
        mark(entry, "first_step")
        await one(self, entry)

    async def _begin_on_loop(self: Any, entry: Any) -> bool:
        mark(entry, "connected")
        ok: bool = await begin_on_loop(self, entry)
        return ok

    def _began(self: Any, entry: Any, on_loop: bool = False) -> bool:
        ok: bool = began(self, entry, on_loop)
        if ok:
            write(entry, time.time())
        return ok

    def _execute_inline(self: Any, entries: list[Any]) -> None:
        inline(self, entries)
        now = time.time()  # the batch's last start: an upper bound for each
        for entry in entries:
            if entry.started:
                write(entry, now)

    worker._start, worker._began, worker._execute_inline = _start, _began, _execute_inline
    worker._begin_on_loop, loop._take, loop._one = _begin_on_loop, _take, _one


class _AfterImport(MetaPathFinder):
    """Install the hooks once both modules are imported (the worker imports them at start)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.loaded: dict[str, Any] = {}

    def find_spec(self, name: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if name not in _TRACED:
            return None
        sys.meta_path.remove(self)
        try:
            spec = find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def run(module: Any) -> None:
            exec_module(module)
            self.loaded[name] = module
            if len(self.loaded) == len(_TRACED):
                sys.meta_path.remove(self)
                _install(self.loaded[_TRACED[0]], self.loaded[_TRACED[1]], self.folder)

        spec.loader.exec_module = run  # type: ignore[method-assign]
        return spec


# `python -m kit.cli worker ...` reads ['-m', 'worker', ...] here, `-m chaos.launch kit.cli
# worker` ['-m', 'kit.cli', 'worker', ...]
if os.environ.get("STARTTRACE_DIR") and "worker" in sys.argv[:3]:
    sys.meta_path.insert(0, _AfterImport(os.environ["STARTTRACE_DIR"]))
