import random

import pytest

from kit.core.outcome import (
    DeadLetter,
    RetryAt,
    after_failure,
    budget_attempt,
    expiry_exhausts,
    should_pause,
)
from kit.core.retry import RetryPolicy

POLICY = RetryPolicy(max_attempts=3, base_s=2.0, cap_s=60.0, jitter="none")


def test_failed_attempt_retries_with_backoff_until_the_budget_is_used():
    rng = random.Random(1)
    assert after_failure(POLICY, 1, 0, 10_000, rng) == RetryAt(12_000, 2)
    assert after_failure(POLICY, 2, 0, 10_000, rng) == RetryAt(14_000, 3)
    assert after_failure(POLICY, 3, 0, 10_000, rng) == DeadLetter(3)


def test_jitter_stays_under_the_ceiling_and_replays_from_a_seed():
    policy = RetryPolicy(max_attempts=5, base_s=1.0, cap_s=4.0, jitter="full")
    first = [after_failure(policy, a, 0, 0, random.Random(7)) for a in range(1, 5)]
    again = [after_failure(policy, a, 0, 0, random.Random(7)) for a in range(1, 5)]
    assert first == again
    for attempt, decision in zip(range(1, 5), first, strict=True):
        assert isinstance(decision, RetryAt)
        assert 0 <= decision.fire_at_ms <= min(4000, 1000 * 2 ** (attempt - 1))


def test_a_replayed_run_gets_a_fresh_budget():
    # died at attempt 3, replayed: attempt 4 is the first of a new budget of 3
    rng = random.Random(0)
    assert after_failure(POLICY, 4, 3, 0, rng) == RetryAt(2000, 5)
    assert after_failure(POLICY, 6, 3, 0, rng) == DeadLetter(3)
    assert budget_attempt(4, 3) == 1
    with pytest.raises(ValueError):
        budget_attempt(3, 3)


def test_expiry_exhausts_only_on_the_last_attempt_of_the_budget():
    assert not expiry_exhausts(POLICY, 2, 0)
    assert expiry_exhausts(POLICY, 3, 0)
    assert not expiry_exhausts(POLICY, 3, 1)


def test_auto_pause_threshold():
    assert not should_pause(5, None)
    assert not should_pause(1, 2)
    assert should_pause(2, 2)
    assert should_pause(3, 2)
    with pytest.raises(ValueError):
        should_pause(1, -1)


def test_a_job_that_names_no_threshold_takes_the_operators_default():
    assert should_pause(5, None, default=5) and not should_pause(4, None, default=5)
    assert not should_pause(10**6, None, default=None)  # no default: never
    assert not should_pause(10**6, None, default=0)  # the operator turned it off


def test_a_job_opts_out_with_zero_whatever_the_default():
    assert not should_pause(10**6, 0, default=5)
    assert should_pause(2, 2, default=5)  # its own threshold wins over the default
