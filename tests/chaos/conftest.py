"""The drills' own stack (chaos.stack: PostgreSQL and Kafka under
$CRONFLEET_HOME/chaos-stack, apart from the integration tests' stack, since the drills
crash them), brought up once per session and left running like `cronfleet stack up`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.drill import Drill
from chaos.runner import DrillResult, RunOptions, run_drill
from chaos.stack import ChaosStack, default_home


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A drill's out directory that its tasks can reach: under a root worker they run as
    `nobody`, who may not enter pytest's own temporary directory (0700). Under the
    system's temporary directory (sticky, open), 0755, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="cronfleet-drill-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def chaos_stack() -> ChaosStack:
    stack = ChaosStack(default_home())
    stack.up()
    return stack


def drill_run(
    drill: Drill,
    stack: ChaosStack,
    out: Path,
    cycles: int,
    seed: int,
    plants: dict[str, str] | None = None,
) -> DrillResult:
    """One drill as `cronfleet chaos run` runs it (no model prediction: not under test)."""
    opts = RunOptions(cycles, seed, out, dict(plants or {}), model=False)
    return run_drill(drill, stack, opts, f"test: {drill.name} --cycles {cycles} --seed {seed}")
