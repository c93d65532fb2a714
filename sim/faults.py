"""Named fault injectors. The names are shared with the chaos drills, so a drill and
a simulation of the same fault can be compared by name.

A scenario lists faults as `[[faults]]` tables: `kind`, `at_s`, `duration_s` and the
kind's own fields. Which runs or workers a fault hits is drawn from the run's seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from sim.scenario import ScenarioError

FAULT_KINDS: dict[str, str] = {
    "scheduler_crash": "a scheduler node (or `node = -1`: every node) dies and restarts",
    "worker_crash": "`workers` workers die mid-run and restart after duration_s",
    "db_stall": "the database serves nothing for duration_s",
    "broker_outage": "Kafka accepts and delivers nothing for duration_s",
    "scheduler_partitioned": "a node is cut off from the database but keeps running",
    "clock_skew": "a node's clock is off by skew_s (database time is unaffected)",
    "poison_jobs": "a share of jobs always fail (retried, then dead-lettered)",
    # bug injectors: break the kit on purpose, to prove the auditor notices
    "inject_drop": "lose `count` runs from a node's timer wheel without a trace",
    "inject_duplicate": "deliver `count` finished runs again, skipping the claim",
}


@dataclass(frozen=True)
class Fault:
    kind: str
    at_ms: int
    duration_ms: int
    node: int = 0
    workers: int = 0
    skew_ms: int = 0
    share: float = 0.0
    count: int = 0

    @property
    def end_ms(self) -> int:
        return self.at_ms + self.duration_ms


def parse_faults(items: list[dict[str, Any]]) -> list[Fault]:
    out = []
    for i, item in enumerate(items):
        kind = item.get("kind")
        if kind not in FAULT_KINDS:
            raise ScenarioError(f"faults.{i}.kind: must be one of {', '.join(FAULT_KINDS)}")
        out.append(
            Fault(
                kind=kind,
                at_ms=int(float(item.get("at_s", 0)) * 1000),
                duration_ms=int(float(item.get("duration_s", 0)) * 1000),
                node=int(item.get("node", 0)),
                workers=int(item.get("workers", 0)),
                skew_ms=int(float(item.get("skew_s", 0)) * 1000),
                share=float(item.get("share", 0.0)),
                count=int(item.get("count", 0)),
            )
        )
    return out


class Windows:
    """Intervals during which a resource is unavailable; `after(t)` is when an action
    attempted at t can happen."""

    def __init__(self, faults: list[Fault]) -> None:
        self.spans = sorted((f.at_ms, f.end_ms) for f in faults if f.duration_ms > 0)

    def __bool__(self) -> bool:
        return bool(self.spans)

    def after(self, t_ms: float) -> float:
        for a, b in self.spans:
            if a <= t_ms < b:
                t_ms = b
        return t_ms

    def after_array(self, t_ms: np.ndarray) -> np.ndarray:
        import numpy as np

        out = t_ms
        for a, b in self.spans:
            out = np.where((out >= a) & (out < b), float(b), out)
        return out
