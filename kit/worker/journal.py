"""The execution journal: one line per task start, written by the worker that started it.

An operator's record of what actually ran, independent of the run table: a run started
twice (a duplicate execution) shows twice here even though its row can only say where it
ended. Load tests and drills count drops and duplicates from it, at any rate: a start
costs one list append; a thread writes the lines out every `flush_s` and at the end.

Line: `run_id <TAB> attempt <TAB> started_ms <TAB> worker_id`, started_ms on the worker's
estimate of the database's clock (kit.worker.clock), as `started_at` is.
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path


class ExecutionJournal:
    def __init__(self, path: Path, worker_id: str, flush_s: float = 0.2) -> None:
        self.path = path
        self.worker_id = worker_id
        self._lines: deque[str] = deque()  # append and popleft are atomic: no lock
        self._flush_s = flush_s
        self._stop = threading.Event()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._thread = threading.Thread(target=self._loop, name="journal", daemon=True)
        self._thread.start()

    def started(self, run_id: str, attempt: int, started_ms: int) -> None:
        self._lines.append(f"{run_id}\t{attempt}\t{started_ms}\t{self.worker_id}\n")

    def flush(self) -> None:
        pop = self._lines.popleft
        lines = [pop() for _ in range(len(self._lines))]
        if lines:
            self._file.write("".join(lines))
            self._file.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self._flush_s):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.flush()
        self._file.close()


def read_journal(path: Path) -> list[tuple[str, int, int, str]]:
    """(run_id, attempt, started_ms, worker_id) per line of a journal file."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        run_id, attempt, started_ms, worker = line.split("\t")
        out.append((run_id, int(attempt), int(started_ms), worker))
    return out
