"""What a run is doing, as the API, the console and the metrics show it: its status,
with a run a worker holds ahead of its second (`claimed`) told apart from one that runs.

A worker claims a run up to the scan-ahead before its second and starts it then, so a
run holding a lease is not yet running until its due time. The stored status stays
`running` for both (the lease's state: kit.core.leases): recording the start as a
status change would be one more row write per run at its second, the instant the fleet
is busiest, and every guard on `status = 'running'` (heartbeat, finish, cancel, reaper,
the lease-token constraint) would have to name two statuses. The state is derived
instead, from what the row already holds: no start recorded and its due time still
ahead means the worker is holding it. After its second a held run starts at once
unless its worker's slots are all busy; the start instant itself is written with the
next heartbeat or the finish (docs/life-of-a-run.md, "Run states").

`RunState` is the API's `status` of a run (docs/vocabulary.md); the database's
`runs.status` holds a `RunStatus`.
"""

from __future__ import annotations

from enum import StrEnum

from kit.core.leases import RunStatus


class RunState(StrEnum):
    pending = "pending"  # committed; no worker holds it yet
    claimed = "claimed"  # a worker holds its lease and waits for its second
    running = "running"  # its second has come and a worker holds it
    succeeded = "succeeded"
    retry_scheduled = "retry_scheduled"
    dead = "dead"
    skipped = "skipped"
    cancelled = "cancelled"


def due_ms(scheduled_at_ms: int, retry_at_ms: int | None) -> int:
    """When the run's current attempt may start: its scheduled time, or its retry's."""
    return scheduled_at_ms if retry_at_ms is None else max(scheduled_at_ms, retry_at_ms)


def run_state(status: RunStatus | str, started: bool, due_at_ms: int, now_ms: int) -> RunState:
    """The state shown for a run whose stored status is `status` at `now_ms`: `claimed`
    while a worker holds it, no start is recorded and its due time is still ahead
    (tests/unit/test_core_run_state.py; the store's SQL twin is held equal to this by
    tests/contract/test_run_lease.py)."""
    stored = RunStatus(status)
    if stored is RunStatus.running and not started and now_ms < due_at_ms:
        return RunState.claimed
    return RunState(stored.value)
