import random

import pytest

from kit.core.errors import FieldError
from kit.core.retry import (
    RetryPolicy,
    backoff_ceiling_ms,
    backoff_delay_ms,
    next_retry_at_ms,
)


def test_parse_defaults_and_roundtrip():
    assert RetryPolicy.parse(None) == RetryPolicy()
    p = RetryPolicy.parse({"max_attempts": 5, "base_s": 2, "cap_s": 60, "jitter": "none"})
    assert p == RetryPolicy(5, 2.0, 60.0, "none")
    assert RetryPolicy.parse(p.to_dict()) == p


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"max_attempts": 0}, "retry.max_attempts"),
        ({"max_attempts": 101}, "retry.max_attempts"),
        ({"max_attempts": True}, "retry.max_attempts"),
        ({"base_s": 0}, "retry.base_s"),
        ({"base_s": 10, "cap_s": 5}, "retry.cap_s"),
        ({"cap_s": 86_401}, "retry.cap_s"),
        ({"base_s": "1"}, "retry.base_s"),
        ({"jitter": "equal"}, "retry.jitter"),
        ({"colour": "red"}, "retry.colour"),
        ({"base_s": float("nan")}, "retry.base_s"),
    ],
)
def test_parse_names_the_bad_field(data, field):
    with pytest.raises(FieldError) as exc:
        RetryPolicy.parse(data)
    assert exc.value.field == field


def test_exponential_ceiling_is_capped():
    p = RetryPolicy(10, 1.0, 30.0, "none")
    rng = random.Random(1)
    assert [backoff_delay_ms(p, a, rng) for a in range(1, 8)] == [
        1000,
        2000,
        4000,
        8000,
        16000,
        30000,
        30000,
    ]
    assert backoff_ceiling_ms(p, 10_000) == 30_000


def test_full_jitter_is_seeded_and_bounded():
    p = RetryPolicy(10, 1.0, 30.0, "full")
    a = [backoff_delay_ms(p, 4, random.Random(7)) for _ in range(3)]
    assert len(set(a)) == 1 and 0 <= a[0] <= 8000
    with pytest.raises(ValueError):
        backoff_delay_ms(p, 0, random.Random(1))


def test_next_retry_none_when_exhausted():
    p = RetryPolicy(3, 1.0, 30.0, "none")
    rng = random.Random(0)
    assert next_retry_at_ms(1_000, p, 1, rng) == 2_000
    assert next_retry_at_ms(1_000, p, 2, rng) == 3_000
    assert next_retry_at_ms(1_000, p, 3, rng) is None
    assert next_retry_at_ms(1_000, RetryPolicy(max_attempts=1), 1, rng) is None
