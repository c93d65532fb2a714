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
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime

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


def run_id(job_id: str, scheduled_at: datetime | int) -> str:
    """The run of `job_id` scheduled at an instant (aware datetime or epoch ms)."""
    ms = scheduled_at if isinstance(scheduled_at, int) else to_epoch_ms(scheduled_at)
    if not 0 <= ms <= MAX_RUN_MS:
        raise ValueError(f"a run's scheduled instant must be within 0..{MAX_RUN_MS} epoch ms")
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
