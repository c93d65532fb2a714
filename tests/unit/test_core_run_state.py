"""A run a worker holds ahead of its second is `claimed`, never `running`
(kit.core.run_state); every other stored status is shown as itself."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.core.leases import RunStatus
from kit.core.run_state import RunState, due_ms, run_state


def test_held_ahead_of_its_second_is_claimed():
    assert run_state(RunStatus.running, started=False, due_at_ms=10_000, now_ms=9_999) == "claimed"


def test_at_its_second_it_is_running():
    assert run_state("running", started=False, due_at_ms=10_000, now_ms=10_000) == "running"


def test_a_recorded_start_is_running_whatever_the_clock_says():
    # a worker whose estimate of the database's clock ran a little fast started it
    assert run_state("running", started=True, due_at_ms=10_000, now_ms=9_990) == "running"


@pytest.mark.parametrize("status", [s for s in RunStatus if s is not RunStatus.running])
def test_every_other_status_is_shown_as_itself(status: RunStatus):
    assert run_state(status, started=False, due_at_ms=10_000, now_ms=0) == status.value


def test_an_unknown_status_is_refused():
    with pytest.raises(ValueError):
        run_state("dispatched", started=False, due_at_ms=0, now_ms=0)


def test_a_retry_is_due_at_its_retry_time():
    assert due_ms(1_000, None) == 1_000
    assert due_ms(1_000, 5_000) == 5_000
    assert due_ms(5_000, 1_000) == 5_000  # never before its schedule


def test_the_states_are_the_statuses_and_claimed():
    assert {s.value for s in RunState} == {s.value for s in RunStatus} | {"claimed"}


@given(
    status=st.sampled_from(list(RunStatus)),
    started=st.booleans(),
    due=st.integers(0, 10**6),
    now=st.integers(0, 10**6),
)
def test_claimed_exactly_when_held_not_started_and_not_due(status, started, due, now):
    state = run_state(status, started, due, now)
    held_ahead = status is RunStatus.running and not started and now < due
    assert (state is RunState.claimed) == held_ahead
    assert state is RunState.claimed or state.value == status.value
