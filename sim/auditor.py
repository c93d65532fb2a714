"""The auditor: what happened to every simulated run, in the vocabulary the chaos
drills use (fired, started, succeeded, retried, dead_lettered, dropped, duplicated),
plus the shared safety invariants of kit.core.invariants."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kit.core import invariants

if TYPE_CHECKING:
    from sim.model import Model


def audit(m: Model) -> dict[str, Any]:
    from sim.model import DEAD, SKIPPED, SUCCEEDED

    started = ~np.isnan(m.start_ms)
    fired = ~np.isnan(m.dispatch_ms)
    skipped = m.status == SKIPPED
    dead = m.status == DEAD
    still = np.zeros(m.wl.n, bool)
    still[m.in_system()] = True
    never = ~started & ~skipped & ~dead
    dropped = never & ~still  # expected, never run, and nowhere left that could run it
    duplicated = m.effects > 1  # a task's effect happened more than once
    report: dict[str, Any] = {
        "expected": int(m.wl.n - skipped.sum()),
        "fired": int(fired.sum()),
        "started": int(started.sum()),
        "succeeded": int((m.status == SUCCEEDED).sum()),
        "retried": int((m.attempt > 1).sum()),
        "retry_attempts": int((m.attempt[m.attempt > 1] - 1).sum()),
        "dead_lettered": int(dead.sum()),
        "skipped": int(skipped.sum()),
        "dropped": int(dropped.sum()),
        "unfinished": int((never & still).sum()),
        "duplicated": int(duplicated.sum()),
        "executions": int(m.executions.sum()),
        "violations": [],
    }
    events = m.lease_events
    for check in (invariants.check_single_holder, invariants.check_monotonic_epochs):
        try:
            check(events)
        except invariants.InvariantViolation as exc:
            report["violations"].append(str(exc))
    # one run per (job, scheduled time): each successful execution of a run is an
    # applied run; the shared checker flags the first run applied twice
    dup = np.flatnonzero(duplicated)
    try:
        invariants.check_unique_runs(
            (int(r), int(m.wl.fire_ms[r])) for r in np.repeat(dup, m.effects[dup].astype(int))
        )
    except invariants.InvariantViolation as exc:
        report["violations"].append(f"duplicated effect: {exc}")
    if (m.inserts > 1).any():
        report["violations"].append(f"{int((m.inserts > 1).sum())} runs inserted twice")
    return report
