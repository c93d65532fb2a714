"""What travels on the run queue: a pointer to a run, never the run itself.

PostgreSQL stays the source of truth; a message only says "run X (attempt n) of job J
is due", so a lost, duplicated or stale message costs at most a wasted claim. The JSON
carries a version field `v` so the format can change without a flag day: a reader
refuses a version it does not know rather than guessing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from kit.core.dispatch import PRIORITY_TIERS, tier_rank
from kit.core.errors import FieldError

DEFAULT_TOPIC_PREFIX = "cronfleet.runs"
MESSAGE_VERSION = 1


def topic_for(tier: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """The topic of a priority tier: one topic per tier, so a consumer can prefer one."""
    tier_rank(tier)  # FieldError for an unknown tier
    return f"{prefix}.{tier}"


def dead_letter_topic(prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
    """Where a worker puts a message it cannot use (with the reason in its headers), so
    one bad message never stalls a partition and is kept for someone to look at."""
    return f"{prefix}.dead-letter"


class MessageError(FieldError):
    """A message on the queue that is not a RunMessage this reader understands."""


class QueuedRun(Protocol):
    """A run as its queue message names it: the scheduler's held run, the store's
    `RunPointer` (met by shape: the transport does not import the store)."""

    @property
    def run_id(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def scheduled_at_ms(self) -> int: ...
    @property
    def tier(self) -> str: ...


@dataclass(frozen=True, slots=True)
class RunMessage:
    run_id: str
    job_id: str
    attempt: int
    scheduled_at_ms: int
    tier: str

    def __post_init__(self) -> None:
        _check(self.run_id, self.job_id, self.attempt, self.scheduled_at_ms, self.tier)

    @classmethod
    def of(cls, run: QueuedRun) -> RunMessage:
        """The message of a run: how the scheduler, the reaper and a worker all make it."""
        return cls(run.run_id, run.job_id, run.attempt, run.scheduled_at_ms, run.tier)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "v": MESSAGE_VERSION,
                "run_id": self.run_id,
                "job_id": self.job_id,
                "attempt": self.attempt,
                "scheduled_at_ms": self.scheduled_at_ms,
                "tier": self.tier,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes | None) -> RunMessage:
        """Parse a message; MessageError naming the field for anything malformed."""
        if not data:
            raise MessageError("message", "is empty")
        try:
            obj: Any = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MessageError("message", f"is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise MessageError("message", "must be a JSON object")
        version = obj.get("v")
        if version != MESSAGE_VERSION or isinstance(version, bool):
            raise MessageError("message.v", f"must be {MESSAGE_VERSION}, got {version!r}")
        missing = [
            f for f in ("run_id", "job_id", "attempt", "scheduled_at_ms", "tier") if f not in obj
        ]
        if missing:
            raise MessageError(f"message.{missing[0]}", "is missing")
        return cls(
            obj["run_id"], obj["job_id"], obj["attempt"], obj["scheduled_at_ms"], obj["tier"]
        )


def _check(run_id: object, job_id: object, attempt: object, at_ms: object, tier: object) -> None:
    for name, value in (("run_id", run_id), ("job_id", job_id)):
        if not isinstance(value, str) or not _is_uuid(value):
            raise MessageError(f"message.{name}", "must be a UUID")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise MessageError("message.attempt", "must be an integer >= 1")
    if not isinstance(at_ms, int) or isinstance(at_ms, bool) or at_ms < 0:
        raise MessageError("message.scheduled_at_ms", "must be a non-negative integer")
    if tier not in PRIORITY_TIERS:
        raise MessageError("message.tier", f"must be one of {', '.join(PRIORITY_TIERS)}")


_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _is_uuid(value: str) -> bool:
    """The canonical text of a UUID (lowercase, hyphenated), as the kit writes its ids:
    other spellings Python accepts ('urn:uuid:...') PostgreSQL would refuse in a claim.
    A pattern, not uuid.UUID(): every message a worker consumes is checked."""
    return _CANONICAL_UUID.fullmatch(value) is not None
