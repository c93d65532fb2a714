"""Why a run that is due has not started, when its tenant's limits are the reason: what
explain and the run page say of it.

Judged when it is read, from the database and the operator's tenant policy; the
workers write nothing for it (a write per run held back would cost the fleet's busiest
path). What the database tells: a run's start is recorded by its worker's next
heartbeat or its finish, so the tenant's runs *running* here are those whose start is
recorded and that have not ended; a run that started moments ago is not counted yet and
a note may come up to one heartbeat late, never early. What it cannot tell is a run
waiting for its tenant's fair share of a worker's slots, or at the worker's own part of
a limit while the fleet is under it: those waits are counted on the workers' /metrics
(`cronfleet_worker_tenant_waiting`), not shown here.
"""

from __future__ import annotations

from dataclasses import dataclass

from kit.core.defaults import RUN_HEARTBEAT_MS
from kit.core.fair_share import LIMIT_RATE, LIMIT_RUNNING
from kit.core.tenancy import TenantLimits

# Starts counted against `max_starts_per_s`: those recorded within this window (a
# heartbeat: the longest a running run's start goes unrecorded).
RATE_WINDOW_MS = RUN_HEARTBEAT_MS


@dataclass(frozen=True)
class TenantLoad:
    """A tenant's runs as the database knows them now."""

    running: int  # started (start recorded) and not ended
    started_in_window: int  # of those, started within the last RATE_WINDOW_MS


def limited(limits: TenantLimits) -> bool:
    """Whether a limit of the workers' (`max_running`, `max_starts_per_s`) holds the
    tenant: only then is its load worth reading."""
    return limits.max_running is not None or limits.max_starts_per_s is not None


def limit_note(
    tenant: str, limits: TenantLimits, load: TenantLoad, window_ms: int = RATE_WINDOW_MS
) -> str | None:
    """What explain says of a run of `tenant` due and not started, when one of its
    limits is reached (`waiting: tenant acme at max_running (2 of 2 running)`), else
    None (tests/unit/test_core_waiting.py)."""
    cap = limits.max_running
    if cap is not None and load.running >= cap:
        return f"waiting: tenant {tenant} at {LIMIT_RUNNING} ({load.running} of {cap} running)"
    rate = limits.max_starts_per_s
    if rate is not None:
        window_s = window_ms / 1000
        most = max(1, int(rate * window_s))  # the starts the rate allows in the window
        if load.started_in_window >= most:
            return (
                f"waiting: tenant {tenant} at {LIMIT_RATE} ({load.started_in_window} of its "
                f"runs running started in the last {window_s:g} s; its limit is {rate:g} "
                "per second)"
            )
    return None
