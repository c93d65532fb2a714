"""The retry rule of kit.core.retry, said as it is written: the ceiling after attempt n
is min(cap, base * 2**(n-1)) (doubling until it meets the cap); 'none' waits exactly the
ceiling, 'full' draws uniformly from [0, ceiling] (reaching both ends, not one value);
the retry time is now + that delay, and None exactly when attempts are exhausted.
Jitter is deterministic and in range."""

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
@given(policies(), attempts)
def test_backoff_ceiling_doubles_from_base_until_the_cap(policy, attempt):
    cap_ms = round(policy.cap_s * 1000)
    ceiling = backoff_ceiling_ms(policy, attempt)
    assert ceiling == min(cap_ms, round(policy.base_s * 1000 * 2 ** min(attempt - 1, 80)))
    if attempt == 1:
        assert ceiling == min(cap_ms, round(policy.base_s * 1000))
    nxt = backoff_ceiling_ms(policy, attempt + 1)
    # doubles (up to rounding) until it meets the cap, then stays there
    assert nxt == cap_ms or abs(nxt - 2 * ceiling) <= 1
    assert ceiling <= nxt <= cap_ms


@settings(max_examples=200)
@given(policies(), attempts, seeds)
def test_no_jitter_waits_exactly_the_ceiling(policy, attempt, seed):
    policy = RetryPolicy(policy.max_attempts, policy.base_s, policy.cap_s, "none")
    delay = backoff_delay_ms(policy, attempt, random.Random(seed))
    assert delay == backoff_ceiling_ms(policy, attempt)
    assert isinstance(delay, int)


@settings(max_examples=60)
@given(policies(), st.integers(1, 30), seeds)
def test_full_jitter_draws_across_zero_to_ceiling(policy, attempt, seed):
    policy = RetryPolicy(policy.max_attempts, policy.base_s, policy.cap_s, "full")
    ceiling = backoff_ceiling_ms(policy, attempt)
    rng = random.Random(seed)
    delays = [backoff_delay_ms(policy, attempt, rng) for _ in range(400)]
    assert all(isinstance(d, int) and 0 <= d <= ceiling for d in delays)
    if ceiling >= 20:
        # uniform on [0, ceiling]: 400 draws all missing a quarter at either end has
        # probability 2 * 0.75**400 (about 1e-50)
        assert min(delays) < ceiling / 4 and max(delays) > ceiling * 3 / 4
        assert ceiling / 3 < sum(delays) / len(delays) < ceiling * 2 / 3


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
        assert at == now_ms + backoff_delay_ms(policy, attempt, random.Random(seed))


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
