"""Drill 8: random, a seeded nemesis. Each cycle draws two or three different faults
from the other drills' kinds and lands them at seeded moments around a peak, so they
overlap: a worker's host dies while the broker is down, the database crashes while a
node is cut off and another's clock is off, and so on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from chaos import nemesis
from chaos.drill import Drill, DrillContext
from chaos.drills.clock_skew import ClockSkewDrill
from chaos.drills.scheduler_partition import SchedulerPartition
from chaos.fleet import ServiceSpec
from chaos.skew import ClockSkew
from chaos.workload import Shape, at_second, standard_classes
from kit.core.timeutil import from_epoch_ms

KINDS = (
    "worker_kill",
    "scheduler_kill",
    "scheduler_cut",
    "postgres_crash",
    "kafka_kill",
    "clock_skew",
    "poison_flood",
)
SKEWED = ("sched-a", "w3")


class RandomNemesis(Drill):
    number = 8
    name = "random"
    title = "random: a seeded nemesis mixing several faults at once"
    summary = (
        "per cycle 2-3 different faults of the kinds above (worker kill, scheduler kill, "
        "scheduler cut off, PostgreSQL crash, broker kill, clock skew, poison flood) at "
        "seeded moments within 4 s of a peak, overlapping"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=80)

    def setup(self, ctx: DrillContext) -> None:
        SchedulerPartition.setup(self, ctx)  # type: ignore[arg-type]
        ClockSkewDrill.setup(self, ctx)  # type: ignore[arg-type]
        ctx.state["skews"] = {n: ClockSkew(ctx.out / "skew" / f"{n}.offset") for n in SKEWED}

    def scheduler_spec(self, ctx: DrillContext, name: str, args: list[str]) -> ServiceSpec:
        netns = ctx.state["namespace"] if name == "sched-b" else None
        return ServiceSpec(name, "scheduler", args, netns=netns, skew=ctx.state["skews"].get(name))

    def worker_spec(self, ctx: DrillContext, name: str, args: list[str]) -> ServiceSpec:
        return ServiceSpec(name, "worker", args, skew=ctx.state["skews"].get(name))

    def _fault(self, ctx: DrillContext, kind: str, index: int, at_ms: int) -> Callable[[], None]:
        rng = ctx.rng
        ttl_s = ctx.timings.partition_lease_ttl_ms / 1000
        if kind == "worker_kill":
            victim, down = rng.choice(ctx.worker_names()), rng.uniform(0.5, 3.0)

            def act() -> None:
                with ctx.fault("worker_kill", victim, index):
                    ctx.kill(victim)
                    time.sleep(down)
                    ctx.restart(victim)

            return act
        if kind == "scheduler_kill":
            victim, down = rng.choice(ctx.scheduler_names()), rng.uniform(1.0, 5.0)
            return lambda: nemesis.scheduler_kill(ctx, index, victim, down)
        if kind == "scheduler_cut":
            hold = ttl_s + rng.uniform(0.5, 3.0)
            return lambda: nemesis.scheduler_cut(ctx, index, "sched-b", hold, mid_scan=False)
        if kind == "postgres_crash":
            down = rng.uniform(0.5, 5.0)
            return lambda: nemesis.postgres_crash(ctx, index, down)
        if kind == "kafka_kill":
            down = rng.uniform(0.5, 3.0)
            return lambda: nemesis.kafka_kill(ctx, index, down)
        if kind == "clock_skew":
            offsets = {n: rng.choice((-1, 1)) * rng.uniform(2.0, 20.0) for n in SKEWED}
            hold = rng.uniform(4.0, 8.0)
            return lambda: nemesis.clock_skew(ctx, index, offsets, hold)
        size = rng.randint(20, 40)
        at = at_second(from_epoch_ms(at_ms), 0.5)
        nemesis.poison_jobs(ctx, at, size)  # now, before any fault of the cycle strikes
        return lambda: nemesis.poison_flood(ctx, index, at, size, created=True)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        peak = ctx.peak(5.0 + rng.uniform(0, 1), self.shape().burst)
        kinds = rng.sample(KINDS, rng.randint(2, 3))
        plan = sorted(
            (int(peak.timestamp() * 1000 + rng.uniform(-3000, 1000)), kind) for kind in kinds
        )
        ctx.notes.append(f"cycle {index}: {', '.join(k for _, k in plan)}")
        errors: list[BaseException] = []
        threads = []
        acts = [(at_ms, self._fault(ctx, kind, index, at_ms)) for at_ms, kind in plan]
        for at_ms, act in acts:

            def run(at_ms: int = at_ms, act: Callable[[], None] = act) -> None:
                try:
                    ctx.sleep_until(at_ms)
                    act()
                except BaseException as exc:  # re-raised on the drill's thread
                    errors.append(exc)

            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(180)
        if errors:
            raise errors[0]
        nemesis.recover(ctx, 5.0)

    def heal_all(self, ctx: DrillContext) -> None:
        SchedulerPartition.heal_all(self, ctx)  # type: ignore[arg-type]
        ClockSkewDrill.heal_all(self, ctx)  # type: ignore[arg-type]
        if ctx.stack.postgres_pid() is None:
            ctx.stack.postgres_start()
        if ctx.stack.kafka_pid() is None:
            ctx.stack.kafka_start()

    def teardown(self, ctx: DrillContext) -> None:
        SchedulerPartition.teardown(self, ctx)  # type: ignore[arg-type]

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        sim_kind = {
            "worker_kill": ("worker_crash", {"workers": 1}),
            "scheduler_kill": ("scheduler_crash", {"node": 1}),
            "scheduler_cut": ("scheduler_partitioned", {"node": 1}),
            "postgres_crash": ("db_stall", {}),
            "kafka_kill": ("broker_outage", {}),
            "clock_skew": ("clock_skew", {"node": 0, "skew_s": 10.0}),
        }
        out: list[dict[str, Any]] = []
        offset = -3.0
        for kind, (sim, extra) in sim_kind.items():
            if kind in measured:
                at_s = peak_s + offset
                out.append({"kind": sim, "at_s": at_s, "duration_s": measured[kind], **extra})
                offset += 0.7
        if "poison_share" in measured:
            out.append({"kind": "poison_jobs", "share": measured["poison_share"]})
        return out
