"""Which of the trigger index's logical partitions a job lives in.

The hash must be stable across processes and Python versions (so not `hash()`):
blake2b of the job id, reduced modulo the partition count.
"""

from __future__ import annotations

from hashlib import blake2b

PARTITION_COUNT = 1024


def partition_of(job_id: str, partitions: int = PARTITION_COUNT) -> int:
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    digest = blake2b(job_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions
