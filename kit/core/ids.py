"""Deterministic identifiers: firing the same trigger twice names the same run."""

from __future__ import annotations

import uuid
from datetime import datetime

from kit.core.timeutil import to_epoch_ms

# Fixed namespace: run ids must agree across processes, versions and the model.
RUN_NAMESPACE = uuid.UUID("5b0f8a52-4c1e-4f59-9d0e-6c6e1b7f3a10")


def run_id(job_id: str, scheduled_at: datetime | int) -> str:
    """The run of `job_id` scheduled at an instant (aware datetime or epoch ms)."""
    ms = scheduled_at if isinstance(scheduled_at, int) else to_epoch_ms(scheduled_at)
    return str(uuid.uuid5(RUN_NAMESPACE, f"{job_id}/{ms}"))
