"""Retry with capped exponential backoff and full jitter (the random source is passed
in, so the model and tests replay the same delays from a seed).

`attempt` is always the 1-based number of the attempt that just failed; `max_attempts`
counts every attempt including the first, so max_attempts=1 means never retry.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from kit.core.errors import FieldError

MAX_ATTEMPTS_LIMIT = 100
MAX_DELAY_S = 86_400.0


class Jitter(StrEnum):
    """How a retry's delay is drawn under its backoff ceiling."""

    full = "full"  # uniformly between 0 and the ceiling (spreads a failing fleet's retries)
    none = "none"  # the ceiling itself


JITTER_KINDS: tuple[str, ...] = tuple(j.value for j in Jitter)
_FIELDS = ("max_attempts", "base_s", "cap_s", "jitter")


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    base_s: float = 1.0
    cap_s: float = 300.0
    jitter: str = "full"

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def parse(cls, data: Mapping[str, object] | None) -> RetryPolicy:
        """Validate the job's `retry` object; missing fields take the defaults."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise FieldError("retry", "must be an object")
        extra = sorted(set(data) - set(_FIELDS))
        if extra:
            raise FieldError(f"retry.{extra[0]}", "unknown field")
        values: dict[str, object] = {}
        attempts = data.get("max_attempts", cls.max_attempts)
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise FieldError("retry.max_attempts", "must be a whole number")
        values["max_attempts"] = attempts
        for name in ("base_s", "cap_s"):
            value = data.get(name, getattr(cls, name))
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FieldError(f"retry.{name}", "must be a number of seconds")
            values[name] = float(value)
        jitter = data.get("jitter", cls.jitter)
        if jitter not in JITTER_KINDS:
            raise FieldError("retry.jitter", f"must be one of {', '.join(JITTER_KINDS)}")
        values["jitter"] = jitter
        return cls(**values)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        return {
            "max_attempts": self.max_attempts,
            "base_s": self.base_s,
            "cap_s": self.cap_s,
            "jitter": self.jitter,
        }


def _validate(policy: RetryPolicy) -> None:
    if not 1 <= policy.max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise FieldError("retry.max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT}")
    if not policy.base_s > 0:  # also refuses NaN
        raise FieldError("retry.base_s", "must be greater than 0")
    if not policy.base_s <= policy.cap_s:
        raise FieldError("retry.cap_s", "must be at least base_s")
    if not policy.cap_s <= MAX_DELAY_S:
        raise FieldError("retry.cap_s", f"must be at most {int(MAX_DELAY_S)} seconds")
    if policy.jitter not in JITTER_KINDS:
        raise FieldError("retry.jitter", f"must be one of {', '.join(JITTER_KINDS)}")


def backoff_ceiling_ms(policy: RetryPolicy, attempt: int) -> int:
    """The largest delay after `attempt` failed: min(cap, base * 2**(attempt-1))."""
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    cap_ms = round(policy.cap_s * 1000)
    if attempt > 64:  # 2**63 * base already exceeds any cap; avoid float overflow
        return cap_ms
    return min(cap_ms, round(policy.base_s * 1000 * (1 << (attempt - 1))))


def backoff_delay_ms(policy: RetryPolicy, attempt: int, rng: random.Random) -> int:
    """Delay before the next attempt; full jitter draws uniformly in [0, ceiling]."""
    ceiling = backoff_ceiling_ms(policy, attempt)
    if policy.jitter == "none":
        return ceiling
    return rng.randint(0, ceiling)


def next_retry_at_ms(
    now_ms: int, policy: RetryPolicy, attempt: int, rng: random.Random
) -> int | None:
    """When the next attempt may start, or None when attempts are exhausted (dead letter)."""
    if attempt >= policy.max_attempts:
        return None
    return now_ms + backoff_delay_ms(policy, attempt, rng)
