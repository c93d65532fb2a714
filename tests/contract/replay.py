"""How every contract suite runs its state machine: hypothesis's stateful runner with no
deadline (each step is a database round trip on a shared machine) and the database
fixture allowed in."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine


def replay(machine: type[RuleBasedStateMachine], examples: int, steps: int) -> None:
    machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    machine.TestCase().runTest()
