"""How every contract suite runs its state machine: hypothesis's stateful runner with no
deadline (each step is a database round trip on a shared machine) and the database
fixture allowed in.

Derandomised, with no example database, whatever profile is loaded: a suite's reach
checks (MUST_REACH, the lease time left it saw) are claims about what it explores, so it
explores the same cases in every session, whatever ran before it
(tests/contract/test_run_lease.py::test_the_suite_explores_the_same_whatever_ran_before_it).
A new counterexample is hunted with a seed of one's own (`--hypothesis-seed`), not here.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine


def replay(machine: type[RuleBasedStateMachine], examples: int, steps: int) -> None:
    machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    machine.TestCase().runTest()
