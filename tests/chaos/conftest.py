"""The drills' own stack (chaos.stack: PostgreSQL and Kafka under
$CRONFLEET_HOME/chaos-stack, apart from the integration tests' stack, since the drills
crash them), brought up once per session and left running like `cronfleet stack up`."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.drill import Drill
from chaos.runner import DrillResult, RunOptions, run_drill
from chaos.stack import ChaosStack, default_home


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
