"""Drill 2: a scheduler node dies (SIGKILL) at the peak: a burst of one-off runs is due
in one second, and the node is killed at a seeded moment from a few seconds before it
(scanning it, publishing it) to just after; it comes back after a seeded pause."""

from __future__ import annotations

from typing import Any

from chaos import nemesis
from chaos.drill import Drill, DrillContext
from chaos.workload import Shape, standard_classes


class SchedulerKill(Drill):
    number = 2
    name = "scheduler-kill"
    title = "scheduler node SIGKILL at the peak"
    summary = (
        "a burst of one-off runs due in one second; SIGKILL one of two scheduler nodes "
        "from 3 s before that second to 0.5 s after; restart it 1-6 s later"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=120)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        peak = ctx.peak(4.0 + rng.uniform(0, 1), self.shape().burst)
        victim = rng.choice(ctx.scheduler_names())
        ctx.sleep_until(int(peak.timestamp() * 1000 - rng.uniform(-500, 3000)))
        nemesis.scheduler_kill(ctx, index, victim, rng.uniform(1.0, 6.0))
        nemesis.recover(ctx, 3.0)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "scheduler_crash", "node": 1, "at_s": peak_s - 1.5,
             "duration_s": measured.get("scheduler_kill", 3.5)},
        ]  # fmt: skip
