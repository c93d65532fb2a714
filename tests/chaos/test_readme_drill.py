"""A drill exactly as README.md writes it: `cronfleet chaos run worker-kill --cycles 2
--seed 5` from the repository root, default options (reports under the relative
`out/chaos`). The drills' own tests pass absolute paths; a relative default once handed
every task a ledger path that did not exist in the task's own directory, so no task took
effect and the drill failed with runs lost."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.stack import ChaosStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
README_COMMAND = "cronfleet chaos run worker-kill --cycles 2 --seed 5"


def test_the_readmes_drill_command_passes_from_the_repository_root(
    chaos_stack: ChaosStack,
) -> None:
    assert README_COMMAND in (ROOT / "README.md").read_text(), "README no longer shows it"
    out = ROOT / "out" / "chaos" / "worker-kill"
    argv = [sys.executable, "-m", "kit.cli", *README_COMMAND.split()[1:]]
    try:
        done = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
        )
    finally:
        chaos_stack.up()  # the command stops the drills' stack; later drills need it
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"worker-kill.*passed", done.stdout + done.stderr), done.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    assert result["passed"] and result["audit"]["effects"] > 0, result["audit"]
    ledger = out / "ledger"
    assert any(p.stat().st_size > 0 for p in ledger.rglob("*") if p.is_file()), "no effect"
