"""Deterministic identifiers: firing the same trigger twice names the same run.

A run id is a UUID of version 8 (RFC 9562's custom layout) laid out like a version 7:
the first 48 bits are the run's scheduled instant in epoch milliseconds, big-endian, the
other 74 bits (beside version and variant) come from SHA-1 of the job and that instant,
as version 5 would. So the id is still a pure function of (job, scheduled time), and it
also says when the run is due: PostgreSQL orders uuids bytewise, so `runs` is
partitioned by day on ranges of the id itself (kit/store/run_history.py) and every
lookup by id, the hot path's and the API's alike, reaches one day's partition without
carrying the time beside it. New ids also arrive in time order, at the right edge of the
primary key, instead of scattered over it.

Migration 0011 re-keyed the runs made before it (version 5: SHA-1 of the same input,
no time in the id) to this layout; `scheduled_ms_of` still tells an old id apart.

Ids that route (docs/shards.md): with the partitions spread over several databases, an
id must lead to its shard without asking the others. The partitioned layout puts the
job's partition in the 10 bits right after the version (bits 75..66 of 128), where the
layout above has the digest's first 10 bits; everything else is the same. The instant
stays in front, so ids still sort by instant and the day partitions still hold them.
The two layouts cannot be told apart by their bits, so a deployment records the instant
it cut over (`partitioned_from_ms`): a run scheduled before it keeps the old id, one at
or after it gets the new one. The choice depends on the run's instant, never on when the
id is computed, so a re-fire of the same (job, instant), a backfill or the model name the
same run whatever the clock says. The cut-over must lie after every run already written
in the old layout (after the scan-ahead of every running scheduler), or a run written
ahead would change its id. A pull-queue task's id is random (no re-fire names it again),
so it needs no cut-over: the new ones are version 8 with the queue's partition in the
same bits, the old ones version 4.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime

from kit.core.partitions import PARTITION_COUNT, partition_of
from kit.core.timeutil import to_epoch_ms

# Fixed namespace: run ids must agree across processes, versions and the model.
RUN_NAMESPACE = uuid.UUID("5b0f8a52-4c1e-4f59-9d0e-6c6e1b7f3a10")
RUN_ID_VERSION = 8
_MS_BITS = 48
MAX_RUN_MS = (1 << _MS_BITS) - 1  # year 10889
_NAMESPACE = RUN_NAMESPACE.bytes
_VERSION = f"{RUN_ID_VERSION:x}"
_sha1 = hashlib.sha1
# A hex digit of the digest with its top two bits replaced by the variant (0b10).
_VARIANT = {f"{n:x}": f"{(n & 0b11) | 0b1000:x}" for n in range(16)}
# A hex digit's last two bits, shifted under a partition's 10 (the partitioned layout).
_LOW_2 = {f"{n:x}": n & 0b11 for n in range(16)}
# Where an id carries its partition: the 10 bits below the version nibble.
PARTITION_BITS = 10
_PARTITION_SHIFT = 66
_PARTITION_MASK = (1 << PARTITION_BITS) - 1
if 1 << PARTITION_BITS != PARTITION_COUNT:  # pragma: no cover - a build-time guard
    raise ImportError("an id holds a partition in 10 bits: PARTITION_COUNT must be 1024")
# A task id's random bits: all but the version (4), the variant (2) and the partition.
TASK_RANDOM_BITS = 128 - 4 - 2 - PARTITION_BITS


def run_id(job_id: str, scheduled_at: datetime | int) -> str:
    """The run of `job_id` scheduled at an instant (aware datetime or epoch ms)."""
    ms = _ms_of(scheduled_at)
    # The layout, in hex digits: the instant (12), the version (1), the digest's first 12
    # bits (3), the variant's 2 bits over the digest's next 62 (16). Built from the hex
    # digest by slicing rather than as an integer: a scan names every run it fires, and
    # this costs a fifth of uuid.UUID(int=...) (2 against 10 us here). Migration 0011
    # keeps that form; tests/unit/test_core_run_history.py::
    # test_migration_0011_re_keys_with_the_cores_own_layout holds the two equal.
    d = _sha1(_NAMESPACE + f"{job_id}/{ms}".encode()).hexdigest()
    t = f"{ms:012x}"
    return f"{t[:8]}-{t[8:]}-{_VERSION}{d[:3]}-{_VARIANT[d[4]]}{d[5:8]}-{d[8:20]}"


def run_id_floor(ms: int) -> str:
    """The lowest run id of an instant: every run scheduled at or after `ms` has an id
    >= this, every run scheduled before it an id below (the bound of a day's partition)."""
    if not 0 <= ms <= MAX_RUN_MS:
        raise ValueError(f"an instant must be within 0..{MAX_RUN_MS} epoch ms")
    return str(uuid.UUID(int=ms << 80))


def scheduled_ms_of(rid: str) -> int | None:
    """The scheduled instant a run id carries; None for an id of the older layout
    (version 5, before migration 0011), which carries none."""
    value = uuid.UUID(rid)
    if value.version != RUN_ID_VERSION:
        return None
    return value.int >> 80


def _ms_of(scheduled_at: datetime | int) -> int:
    ms = scheduled_at if isinstance(scheduled_at, int) else to_epoch_ms(scheduled_at)
    if not 0 <= ms <= MAX_RUN_MS:
        raise ValueError(f"a run's scheduled instant must be within 0..{MAX_RUN_MS} epoch ms")
    return ms


def _check_partition(partition: int) -> None:
    if not 0 <= partition < PARTITION_COUNT:
        raise ValueError(f"a partition must be within 0..{PARTITION_COUNT - 1}, not {partition}")


def partitioned_run_id(job_id: str, scheduled_at: datetime | int, partition: int) -> str:
    """The run of `job_id` at an instant, in the layout that carries the job's partition
    (`partition_of(job_id)`; passed in because a scan already knows it): `run_id`'s id
    with bits 75..66 replaced by the partition."""
    ms = _ms_of(scheduled_at)
    _check_partition(partition)
    d = _sha1(_NAMESPACE + f"{job_id}/{ms}".encode()).hexdigest()
    t = f"{ms:012x}"
    # The partition's 10 bits, then the last 2 of the 12 digest bits the old layout has.
    p = f"{(partition << 2) | _LOW_2[d[2]]:03x}"
    return f"{t[:8]}-{t[8:]}-{_VERSION}{p}-{_VARIANT[d[4]]}{d[5:8]}-{d[8:20]}"


def run_id_at(job_id: str, scheduled_at: datetime | int, partitioned_from_ms: int | None) -> str:
    """The run of `job_id` at an instant in the layout its instant calls for: the old one
    before the deployment's cut-over (or with none yet: None), the partitioned one from it."""
    ms = _ms_of(scheduled_at)
    if partitioned_from_ms is None or ms < partitioned_from_ms:
        return run_id(job_id, ms)
    return partitioned_run_id(job_id, ms, partition_of(job_id))


def partition_of_run_id(rid: str, partitioned_from_ms: int | None) -> int | None:
    """The partition a run id carries; None for an id of an older layout (version 5, or
    scheduled before the cut-over): its run is found by asking every shard."""
    value = uuid.UUID(rid)
    if partitioned_from_ms is None or value.version != RUN_ID_VERSION:
        return None
    if (value.int >> 80) < partitioned_from_ms:
        return None
    return (value.int >> _PARTITION_SHIFT) & _PARTITION_MASK


def queue_task_id(partition: int, rand_bits: int) -> str:
    """A new pull-queue task's id: version 8, the queue's partition in bits 75..66 (where
    a run id has its), `rand_bits` (TASK_RANDOM_BITS of them, the caller's random source:
    the core draws none) in the rest."""
    _check_partition(partition)
    if not 0 <= rand_bits < 1 << TASK_RANDOM_BITS:
        raise ValueError(f"a task id's random part must be within 0..2**{TASK_RANDOM_BITS} - 1")
    value = (
        (rand_bits >> 64) << 80  # 48 bits
        | RUN_ID_VERSION << 76
        | partition << _PARTITION_SHIFT
        | ((rand_bits >> 62) & 0b11) << 64
        | 0b10 << 62  # the variant
        | rand_bits & ((1 << 62) - 1)
    )
    return str(uuid.UUID(int=value))


def partition_of_task_id(task_id: str) -> int | None:
    """The partition a queue task id carries; None for a task made before ids carried
    one (version 4): its task is found by asking every shard."""
    value = uuid.UUID(task_id)
    if value.version != RUN_ID_VERSION:
        return None
    return (value.int >> _PARTITION_SHIFT) & _PARTITION_MASK
