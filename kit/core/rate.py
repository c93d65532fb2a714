"""A token bucket: how many requests a tenant may make per second, with a burst.

The decision is pure (time is an argument); the buckets live in the API process that
asks (kit.api.tenancy), so the rate is per process: an operator who runs N API
processes and wants R per second for a tenant sets `api_rate_per_s = R / N`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Bucket:
    tokens: float  # what is left, at `at`
    at: float  # seconds, on the caller's monotonic clock


@dataclass(frozen=True)
class Taken:
    allowed: bool
    bucket: Bucket  # the state to keep
    retry_after_s: int  # 0 when allowed; else whole seconds, at least 1, until a token


def take(bucket: Bucket | None, rate_per_s: float, burst: int, now: float) -> Taken:
    """One request at `now`: allowed if a whole token is in the bucket (a new bucket is
    full). The bucket refills at `rate_per_s` up to `burst`; a clock that went back
    refills nothing. Refused: the bucket is kept as it is, and `retry_after_s` is the
    wait for one token, rounded up to a whole second (HTTP's Retry-After)."""
    if rate_per_s <= 0 or burst < 1:
        raise ValueError("rate_per_s must be > 0 and burst >= 1")
    if bucket is None:
        tokens = float(burst)
    else:
        elapsed = max(0.0, now - bucket.at)
        tokens = min(float(burst), bucket.tokens + elapsed * rate_per_s)
    if tokens >= 1.0:
        return Taken(True, Bucket(tokens - 1.0, now), 0)
    wait = (1.0 - tokens) / rate_per_s
    return Taken(False, Bucket(tokens, now), max(1, math.ceil(wait)))
