"""What explain and the run page say of a run due and not started that its tenant's
limits on the workers hold (kit.core.waiting decides, kit.store.waiting reads)."""

from __future__ import annotations

from kit.core.tenancy import TenantLimits
from kit.core.waiting import RATE_WINDOW_MS, TenantLoad, limit_note, limited
from kit.tasks.registry import INLINE


def load_window(limits: TenantLimits) -> int | None:
    """The window the store reads a tenant's load over, or None: no limit of the
    workers holds the tenant, nothing to read."""
    return RATE_WINDOW_MS if limited(limits) else None


def waiting_note(
    tenant: str,
    limits: TenantLimits,
    load: TenantLoad | None,
    task_type: str | None,
) -> str | None:
    """What holds a run due and not started at its tenant's limits (kit.core.waiting),
    or None. An inline task (`noop`) takes no slot: no limit holds it."""
    if load is None or task_type in INLINE:
        return None
    return limit_note(tenant, limits, load)
