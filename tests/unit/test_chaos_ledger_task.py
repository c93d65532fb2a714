"""The drills' task script, run by /bin/sh as a worker would run it: what a task that
honours the idempotency key leaves in the ledger."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from chaos import ledger

KEY = "01a24542-c730-875f-a3ae-d8bcf50b3854"


def _run(ledger_dir: Path, mode: str, attempt: int) -> None:
    argv = ledger.task_spec(ledger_dir, mode)["argv"]
    env = {**os.environ, "CRONFLEET_IDEMPOTENCY_KEY": KEY, "CRONFLEET_ATTEMPT": str(attempt)}
    subprocess.run(argv, env=env, check=True, timeout=10)


def test_a_second_execution_after_the_first_finished_is_deduplicated(tmp_path: Path) -> None:
    ledger.prepare(tmp_path)
    _run(tmp_path, "key", 1)
    _run(tmp_path, "key", 2)
    assert [line.attempt for line in ledger.effects(tmp_path)] == [1]
    assert [e.event for e in ledger.executions(tmp_path)] == ["start", "start", "dedup"]


def test_an_execution_killed_between_its_effect_and_its_marker_is_not_repeated(
    tmp_path: Path,
) -> None:
    """CI's poison-flood drill: a sibling `killworker` task took the worker and its tasks
    down 0-10 ms after one task's effect line, before its marker file. The retry must
    find the key in the effect line itself."""
    ledger.prepare(tmp_path)
    with (tmp_path / "effects.log").open("a") as f:
        f.write(f"effect {KEY} 1 1796458337268 28892\n")  # the killed attempt's one line
    _run(tmp_path, "key", 2)
    assert [line.attempt for line in ledger.effects(tmp_path)] == [1]
    assert ledger.executions(tmp_path)[-1].event == "dedup"


def test_a_naive_task_acts_every_time(tmp_path: Path) -> None:
    """The other side: `naive` ignores the key, so the audit's duplicate count can fail."""
    ledger.prepare(tmp_path)
    _run(tmp_path, "naive", 1)
    _run(tmp_path, "naive", 2)
    assert [line.attempt for line in ledger.effects(tmp_path)] == [1, 2]


def test_a_ledger_its_run_as_user_cannot_reach_is_refused_before_the_drill() -> None:
    """Under a root worker the tasks run as `nobody`: a ledger below a directory closed to
    that user would make every run look lost. Refused at once, naming the cause."""
    if os.geteuid() != 0:
        return  # no identity switch, nothing to probe: the kit runs commands as itself
    base = Path(tempfile.mkdtemp(prefix="cronfleet-ledger-test-"))
    try:
        base.chmod(0o755)
        closed = base / "closed"
        closed.mkdir(mode=0o700)
        with pytest.raises(ledger.LedgerUnreachable, match=r"'nobody'.*--out"):
            ledger.prepare(closed / "ledger", "nobody")
        closed.chmod(0o755)
        ledger.prepare(closed / "ledger", "nobody")  # reachable now: accepted
        assert not (closed / "ledger" / "done" / ".probe").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
