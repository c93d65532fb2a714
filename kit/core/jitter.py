"""Deterministic jitter: a job always lands at the same offset inside its window, so
the top-of-hour spike is spread out without making any one job's timing random."""

from __future__ import annotations

from hashlib import blake2b

from kit.core.errors import FieldError


def jitter_offset_ms(job_id: str, max_jitter_ms: int) -> int:
    """An offset in [0, max_jitter_ms) fixed by the job id (0 when jitter is off)."""
    if isinstance(max_jitter_ms, bool) or not isinstance(max_jitter_ms, int):
        raise FieldError("jitter_ms", "must be a whole number of milliseconds")
    if max_jitter_ms < 0:
        raise FieldError("jitter_ms", "must not be negative")
    if max_jitter_ms == 0:
        return 0
    # A personalised hash, so offsets are not correlated with partition_of().
    digest = blake2b(job_id.encode(), digest_size=8, person=b"cf-jitter").digest()
    return int.from_bytes(digest, "big") % max_jitter_ms
