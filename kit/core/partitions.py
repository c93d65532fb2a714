"""Which of the trigger index's logical partitions a job lives in, and which node owns it.

The hash must be stable across processes and Python versions (so not `hash()`):
blake2b of the job id, reduced modulo the partition count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from hashlib import blake2b

PARTITION_COUNT = 1024


def partition_of(job_id: str, partitions: int = PARTITION_COUNT) -> int:
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    return _hash(job_id) % partitions


def partition_of_queue(tenant: str, queue: str) -> int:
    """A pull queue's partition: its tasks live on that partition's shard, together."""
    return partition_of(f"{tenant}/{queue}")


def _hash(job_id: str) -> int:
    return int.from_bytes(blake2b(job_id.encode(), digest_size=8).digest(), "big")


def partitions_of(job_ids: Iterable[str], partitions: int = PARTITION_COUNT) -> list[int]:
    """`partition_of` for many ids at once (the model places millions of jobs)."""
    if partitions < 1:
        raise ValueError("partitions must be at least 1")
    return [_hash(j) % partitions for j in job_ids]


def assign_partitions(
    partitions: int, nodes: Sequence[str], current: Mapping[int, str]
) -> dict[int, str]:
    """Which live node owns each partition: balanced, sticky and deterministic.

    Balanced: per-node counts differ by at most one. Sticky: a partition keeps its
    current owner while that owner is live and under its quota, so a node joining
    takes only what it must and a node leaving gives up only its own partitions.
    The one-larger quotas go to the nodes that already hold the most (ties by
    name), which is what makes join/leave moves minimal. Deterministic: nodes are
    sorted, partitions walked in order. O(partitions + nodes log nodes), because
    the model calls it every simulated second.
    """
    if partitions < 0:
        raise ValueError("partitions must not be negative")
    live = sorted(set(nodes))
    if not live or partitions == 0:
        return {}
    held = dict.fromkeys(live, 0)
    for p, owner in current.items():
        if owner in held and 0 <= p < partitions:
            held[owner] += 1
    base, extra = divmod(partitions, len(live))
    by_holding = sorted(live, key=lambda n: (-held[n], n))
    quota = {n: base + (1 if i < extra else 0) for i, n in enumerate(by_holding)}

    result: dict[int, str] = {}
    kept = dict.fromkeys(live, 0)
    orphans: list[int] = []
    for p in range(partitions):
        holder = current.get(p)
        if holder is not None and holder in quota and kept[holder] < quota[holder]:
            result[p] = holder
            kept[holder] += 1
        else:
            orphans.append(p)
    i = 0
    for node in live:
        need = quota[node] - kept[node]
        for p in orphans[i : i + need]:
            result[p] = node
        i += need
    return result
