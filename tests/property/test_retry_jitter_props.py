"""Backoff stays in [0, cap], its ceiling never falls as attempts grow, and the retry
time is None exactly when attempts are exhausted. Jitter is deterministic and in range."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.jitter import jitter_offset_ms
from kit.core.retry import RetryPolicy, backoff_ceiling_ms, backoff_delay_ms, next_retry_at_ms


@st.composite
def policies(draw):
    base = draw(st.floats(0.001, 3_600, allow_nan=False))
    cap = draw(st.floats(base, 86_400, allow_nan=False))
    return RetryPolicy(
        max_attempts=draw(st.integers(1, 100)),
        base_s=base,
        cap_s=cap,
        jitter=draw(st.sampled_from(["full", "none"])),
    )


attempts = st.integers(1, 200)
seeds = st.integers(0, 2**32)


@settings(max_examples=200)
@given(policies(), attempts, seeds)
def test_backoff_within_zero_and_cap(policy, attempt, seed):
    delay = backoff_delay_ms(policy, attempt, random.Random(seed))
    assert 0 <= delay <= backoff_ceiling_ms(policy, attempt) <= round(policy.cap_s * 1000)
    assert isinstance(delay, int)


@settings(max_examples=100)
@given(policies(), attempts)
def test_backoff_ceiling_non_decreasing(policy, attempt):
    assert backoff_ceiling_ms(policy, attempt) <= backoff_ceiling_ms(policy, attempt + 1)


@settings(max_examples=100)
@given(policies(), attempts, seeds)
def test_backoff_is_reproducible_from_the_seed(policy, attempt, seed):
    a = backoff_delay_ms(policy, attempt, random.Random(seed))
    assert a == backoff_delay_ms(policy, attempt, random.Random(seed))


@settings(max_examples=200)
@given(policies(), attempts, st.integers(0, 2**45), seeds)
def test_next_retry_none_exactly_when_exhausted(policy, attempt, now_ms, seed):
    at = next_retry_at_ms(now_ms, policy, attempt, random.Random(seed))
    assert (at is None) == (attempt >= policy.max_attempts)
    if at is not None:
        assert now_ms <= at <= now_ms + round(policy.cap_s * 1000)


@settings(max_examples=100)
@given(policies())
def test_roundtrip(policy):
    assert RetryPolicy.parse(policy.to_dict()) == policy


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=40), st.integers(1, 10**7))
def test_jitter_deterministic_and_in_range(job_id, max_ms):
    offset = jitter_offset_ms(job_id, max_ms)
    assert 0 <= offset < max_ms
    assert offset == jitter_offset_ms(job_id, max_ms)
