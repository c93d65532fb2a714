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
