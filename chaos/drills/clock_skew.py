"""Drill 6: clock skew. One scheduler node and one worker run under libfaketime; each
cycle steps their wall clocks seconds ahead or behind (each its own way), across a peak,
then back. Correctness must not depend on their clocks: leases and start times are the
database's."""

from __future__ import annotations

from typing import Any

from chaos import nemesis
from chaos.drill import Drill, DrillContext, DrillSetupError
from chaos.fleet import ServiceSpec
from chaos.skew import ClockSkew, SkewError
from chaos.workload import Shape, standard_classes

SKEWED = ("sched-b", "w2")


class ClockSkewDrill(Drill):
    number = 6
    name = "clock-skew"
    title = "clock skew: a scheduler node and a worker seconds ahead and behind"
    summary = (
        "sched-b and w2 under libfaketime; each cycle steps each clock 2-20 s ahead or "
        "behind for 6-10 s across a peak, then back to true"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=80)

    def setup(self, ctx: DrillContext) -> None:
        skews = {name: ClockSkew(ctx.out / "skew" / f"{name}.offset") for name in SKEWED}
        probe = skews[SKEWED[0]]
        try:
            probe.set(7.0)
            probe.verify()
            probe.set(0.0)
        except SkewError as exc:
            raise DrillSetupError(str(exc)) from None
        ctx.state["skews"] = skews

    def scheduler_spec(self, ctx: DrillContext, name: str, args: list[str]) -> ServiceSpec:
        return ServiceSpec(name, "scheduler", args, skew=ctx.state["skews"].get(name))

    def worker_spec(self, ctx: DrillContext, name: str, args: list[str]) -> ServiceSpec:
        return ServiceSpec(name, "worker", args, skew=ctx.state["skews"].get(name))

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        peak = ctx.peak(4.0 + rng.uniform(0, 1), self.shape().burst)
        offsets = {name: rng.choice((-1, 1)) * rng.uniform(2.0, 20.0) for name in SKEWED}
        ctx.sleep_until(int(peak.timestamp() * 1000 - 3000))
        nemesis.clock_skew(ctx, index, offsets, rng.uniform(6.0, 10.0))
        nemesis.recover(ctx, 2.0)

    def heal_all(self, ctx: DrillContext) -> None:
        for skew in ctx.state.get("skews", {}).values():
            skew.set(0.0)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "clock_skew", "node": 1, "at_s": peak_s - 3,
             "duration_s": measured.get("clock_skew", 8.0),
             "skew_s": measured.get("clock_skew_offset", 10.0)},
        ]  # fmt: skip
