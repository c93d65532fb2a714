"""The auditor: what happened to every simulated run, in the vocabulary the chaos
drills use (fired, started, succeeded, retried, dead_lettered, dropped, duplicated),
plus the shared safety invariants of kit.core.invariants.

The per-run checks are made as runs are retired (sim.stats: a run found nowhere and
not finished is dropped; a run whose task took effect twice is duplicated and fed to
`kit.core.invariants.check_unique_runs`); the lease history is checked here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kit.core import invariants

if TYPE_CHECKING:
    from sim.model import Model


def audit(m: Model) -> dict[str, Any]:
    c = m.stats.counts
    report: dict[str, Any] = {
        "expected": c["generated"] - c["skipped"],
        "fired": c["fired"],
        "started": c["started"],
        "succeeded": c["succeeded"],
        "retried": c["retried"],
        "retry_attempts": c["retry_attempts"],
        "dead_lettered": c["dead_lettered"],
        "skipped": c["skipped"],
        "cancelled": c["cancelled"],
        "dropped": c["dropped"],
        "lost_after_start": c["lost_after_start"],
        "unfinished": c["in_flight_at_end"],
        "duplicated": c["duplicated"],
        "executions": c["executions"],
        "violations": list(m.stats.violations),
    }
    events = m.lease_events
    for check in (invariants.check_single_holder, invariants.check_monotonic_epochs):
        try:
            check(events)
        except invariants.InvariantViolation as exc:
            report["violations"].append(str(exc))
    return report
