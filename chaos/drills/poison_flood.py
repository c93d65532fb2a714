"""Drill 7: a poison flood. Besides the healthy workload, recurring jobs whose tasks
always fail, hang past their timeout, crash (SIGSEGV) or kill the very worker that runs
them; and at each cycle's peak a flood of one-off poison runs due in the same second as a
burst of healthy ones. Poison must end dead-lettered; healthy runs must not be lost."""

from __future__ import annotations

from typing import Any

from chaos import nemesis
from chaos.drill import Drill, DrillContext
from chaos.workload import JobClass, Shape, at_second, standard_classes


class PoisonFlood(Drill):
    number = 7
    name = "poison-flood"
    title = "poison flood: tasks that always fail, hang past their timeout, or crash"
    summary = (
        "recurring poison jobs (fail, hang, SIGSEGV, kill their worker) and, per cycle, "
        "40-80 one-off poison runs due in the second of a burst of healthy ones"
    )

    def shape(self) -> Shape:
        extra = (
            JobClass("fail", 3, mode="fail", every_s=2),
            JobClass("hang", 2, mode="hang", every_s=3),
            JobClass("crash", 2, mode="crash", every_s=2),
            JobClass("killer", 1, mode="killworker", every_s=7),
        )
        return Shape(standard_classes(extra), burst=60)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        from datetime import UTC, datetime

        at = at_second(datetime.now(UTC), 4.0 + rng.uniform(0, 1))
        ctx.workload.burst(at, self.shape().burst)
        nemesis.poison_flood(ctx, index, at, rng.randint(40, 80))
        nemesis.recover(ctx, 4.0)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [{"kind": "poison_jobs", "share": measured.get("poison_share", 0.2)}]
