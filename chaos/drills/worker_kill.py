"""Drill 1: a worker's host dies (SIGKILL to the worker and its tasks) after a task made
its effect and before the worker wrote the outcome; and, in the same cycle, while
another task was still working towards its effect."""

from __future__ import annotations

from typing import Any

from chaos import nemesis
from chaos.drill import Drill, DrillContext
from chaos.workload import JobClass, Shape, standard_classes


class WorkerKill(Drill):
    number = 1
    name = "worker-kill"
    title = "worker SIGKILL after the task's effect, before the ack"
    summary = (
        "SIGKILL a worker (and its tasks) while a task sits between its effect and its "
        "finish, then another while a task works towards its effect; restart after a "
        "seeded pause"
    )

    def shape(self) -> Shape:
        extra = (
            JobClass("window", 4, every_s=1, window_s=1.5),
            JobClass("long", 2, every_s=2, pre_s=1.5),
        )
        return Shape(standard_classes(extra), burst=0)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        nemesis.worker_kill_after_effect(ctx, index, rng.uniform(0.2, 2.0))
        nemesis.worker_kill_mid_task(ctx, index, rng.uniform(0.2, 2.0))
        nemesis.recover(ctx, ctx.timings.run_lease_ttl_ms / 1000 + 1.5)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "worker_crash", "at_s": peak_s, "workers": 1,
             "duration_s": measured.get("worker_kill_after_effect", 1.0)},
        ]  # fmt: skip
