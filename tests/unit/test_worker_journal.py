"""The execution journal keeps every start a worker makes, from several threads at once."""

import threading
from pathlib import Path

from kit.worker.journal import ExecutionJournal, read_journal


def test_every_start_from_every_thread_is_written_once(tmp_path: Path) -> None:
    journal = ExecutionJournal(tmp_path / "w1.journal", "w1", flush_s=0.001)

    def start(t: int) -> None:
        for i in range(5000):
            journal.started(f"{t}-{i}", 1 + i % 3, i)

    threads = [threading.Thread(target=start, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    journal.close()
    lines = read_journal(tmp_path / "w1.journal")
    assert len(lines) == 20_000
    assert {r for r, *_ in lines} == {f"{t}-{i}" for t in range(4) for i in range(5000)}
    assert all(w == "w1" and a == 1 + s % 3 for _, a, s, w in lines)
