"""What a store call can refuse, in domain terms the API maps to HTTP statuses."""

from __future__ import annotations


class StoreError(Exception):
    pass


class JobNotFound(StoreError):
    """No such job for this tenant (another tenant's job is not found either)."""


class RunNotFound(StoreError):
    pass


class JobPaused(StoreError):
    """The job is paused and the request would run it (a backfill)."""


class NameTaken(StoreError):
    """A job name is unique per tenant; `names` are the ones already in use."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"job name already in use: {', '.join(names)}")
        self.names = names


class IdempotencyConflict(StoreError):
    """The Idempotency-Key was used before, for a different request or a deleted job."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class JobLimitReached(StoreError):
    """The tenant has `count` jobs and may have `limit` (the operator's `max_jobs`):
    `adding` more would pass it, so none was written."""

    def __init__(self, count: int, limit: int, adding: int) -> None:
        super().__init__(f"max_jobs: the tenant has {count} jobs of {limit}; {adding} more refused")
        self.count = count
        self.limit = limit
        self.adding = adding


class QueueFull(StoreError):
    """The queue has `count` unfinished tasks of the tenant's `limit`
    (`max_queued_per_queue`): `adding` more would pass it, so none was written."""

    def __init__(self, count: int, limit: int, adding: int) -> None:
        super().__init__(f"max_queued_per_queue: {count} tasks queued of {limit}")
        self.count = count
        self.limit = limit
        self.adding = adding


class TierNotAllowed(StoreError):
    """The job's priority tier is not one the operator allows its tenant (a run-now or a
    backfill of a job whose tier was taken back): nothing was written."""

    def __init__(self, tier: str) -> None:
        super().__init__(tier)
        self.tier = tier
