"""Safety invariants as pure checkers, shared by the tests, the model's auditor and
the chaos drills. They raise (never `assert`), so they hold under `python -O` too.

Records are read by attribute or by key, so a `PartitionLease`, a store row mapping
or a small tuple all work:
- holder events: (partition_id, epoch, owner)
- runs: (job_id, scheduled_at)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class InvariantViolation(Exception):
    """A safety property of the scheduler does not hold; the message says which."""


def _fields(record: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    if isinstance(record, tuple) and not hasattr(record, "_fields"):
        if len(record) < len(names):
            raise ValueError(f"record {record!r} needs {', '.join(names)}")
        return record[: len(names)]
    if isinstance(record, Mapping):
        return tuple(record[n] for n in names)
    return tuple(getattr(record, n) for n in names)


def check_single_holder(events: Iterable[Any]) -> None:
    """At most one holder per (partition, epoch): two nodes never hold the same epoch.

    Events with no owner (a released lease) are ignored.
    """
    holders: dict[tuple[int, int], Any] = {}
    for event in events:
        partition_id, epoch, owner = _fields(event, ("partition_id", "epoch", "owner"))
        if owner is None:
            continue
        key = (partition_id, epoch)
        seen = holders.setdefault(key, owner)
        if seen != owner:
            raise InvariantViolation(
                f"partition {partition_id} epoch {epoch} held by both {seen} and {owner}"
            )


def check_monotonic_epochs(events: Iterable[Any]) -> None:
    """Per partition, granted epochs in event order never go backwards."""
    last: dict[int, int] = {}
    for event in events:
        partition_id, epoch = _fields(event, ("partition_id", "epoch"))
        if epoch < last.get(partition_id, epoch):
            raise InvariantViolation(
                f"partition {partition_id} epoch went back from {last[partition_id]} to {epoch}"
            )
        last[partition_id] = epoch


def check_unique_runs(runs: Iterable[Any]) -> None:
    """At most one run per (job_id, scheduled_at): firing a trigger twice is one run."""
    seen: set[tuple[Any, Any]] = set()
    for run in runs:
        key = _fields(run, ("job_id", "scheduled_at"))
        if key in seen:
            raise InvariantViolation(f"job {key[0]} has two runs scheduled at {key[1]}")
        seen.add(key)
