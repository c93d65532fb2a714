"""What the maintenance service may expire, and when: the rules, as pure predicates.

The store's DELETE statements (kit.store.maintenance) say the same thing in SQL over
indexes; an integration test holds the two equal on the same rows. The rules never
drop what the kit still needs:

- an idempotency key is only needed while a client may retry its create: it expires
  `idempotency_key_s` after it was used;
- a queue task expires `queue_task_s` after it *finished* (done or dead); a queued or
  leased task never expires, however old;
- a dead letter not replayed is kept `dead_letter_s` after the run died, replayed or
  not acted on; a replayed one is kept while its run is live (pending, running or
  waiting for a retry: the run's attempt budget is read from it) and then
  `replayed_dead_letter_s` after the replay;
- a job audit entry expires `audit_s` after it was written;
- a console session expires at its `expires_at`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from kit.core.leases import BUSY
from kit.core.queue_task import FINISHED

# Run statuses for which a replayed dead letter is still read (its attempt base).
LIVE_RUN_STATUSES = tuple(sorted(s.value for s in BUSY))
FINISHED_TASK_STATUSES = tuple(sorted(s.value for s in FINISHED))


@dataclass(frozen=True)
class Retention:
    idempotency_key_s: int = 86_400
    queue_task_s: int = 7 * 86_400
    dead_letter_s: int = 30 * 86_400
    replayed_dead_letter_s: int = 86_400
    audit_s: int = 400 * 86_400

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number of seconds >= 0")


def _older(instant: datetime | None, now: datetime, seconds: int) -> bool:
    return instant is not None and instant <= now - timedelta(seconds=seconds)


def idempotency_key_expired(created_at: datetime, now: datetime, r: Retention) -> bool:
    return _older(created_at, now, r.idempotency_key_s)


def queue_task_expired(
    status: str, finished_at: datetime | None, now: datetime, r: Retention
) -> bool:
    return status in FINISHED_TASK_STATUSES and _older(finished_at, now, r.queue_task_s)


def dead_letter_expired(
    created_at: datetime,
    replayed_at: datetime | None,
    run_status: str | None,
    now: datetime,
    r: Retention,
) -> bool:
    """`run_status` None: the run row is gone (its history was dropped)."""
    if replayed_at is None:
        return _older(created_at, now, r.dead_letter_s)
    if run_status in LIVE_RUN_STATUSES:
        return False
    return _older(replayed_at, now, r.replayed_dead_letter_s)


def audit_entry_expired(at: datetime, now: datetime, r: Retention) -> bool:
    return _older(at, now, r.audit_s)
