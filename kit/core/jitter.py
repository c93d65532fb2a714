"""Deterministic jitter: a job always lands at the same offset inside its window, so
the top-of-hour spike is spread out without making any one job's timing random."""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import blake2b

from kit.core.errors import FieldError

_PERSON = b"cf-jitter"


def _check(max_jitter_ms: int) -> None:
    if isinstance(max_jitter_ms, bool) or not isinstance(max_jitter_ms, int):
        raise FieldError("jitter_ms", "must be a whole number of milliseconds")
    if max_jitter_ms < 0:
        raise FieldError("jitter_ms", "must not be negative")


def jitter_offset_ms(job_id: str, max_jitter_ms: int) -> int:
    """An offset in [0, max_jitter_ms) fixed by the job id (0 when jitter is off)."""
    _check(max_jitter_ms)
    if max_jitter_ms == 0:
        return 0
    return _hash(job_id) % max_jitter_ms


# A personalised hash, so offsets are not correlated with partition_of(). Each hash
# starts from a copy of the personalised state: half the cost of setting the parameters
# up again (a scan computes one per jittered job it fires).
_BLAKE = blake2b(digest_size=8, person=_PERSON)


def _hash(job_id: str) -> int:
    h = _BLAKE.copy()
    h.update(job_id.encode())
    return int.from_bytes(h.digest(), "big")


def jitter_offsets_ms(job_ids: Iterable[str], max_jitter_ms: int) -> list[int]:
    """`jitter_offset_ms` for many ids at once (the model places millions of jobs)."""
    _check(max_jitter_ms)
    if max_jitter_ms == 0:
        return [0 for _ in job_ids]
    return [_hash(j) % max_jitter_ms for j in job_ids]
