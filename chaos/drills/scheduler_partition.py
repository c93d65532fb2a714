"""Drill 3: a scheduler node cut off from PostgreSQL while it believes it owns its
partitions. The node runs in a network namespace of the drill's own; nftables drops its
packets to and from the database (its broker link stays up), most often at a moment it
is inside a scan transaction, for longer than its lease; then the link heals."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url

from chaos import nemesis
from chaos.drill import Drill, DrillContext, DrillSetupError
from chaos.fleet import ServiceSpec
from chaos.netns import Namespace, NamespaceError
from chaos.workload import Shape, standard_classes

CUT_NODE = "sched-b"


class SchedulerPartition(Drill):
    number = 3
    name = "scheduler-partition"
    title = "a scheduler node cut off from PostgreSQL (network namespace, nftables)"
    summary = (
        "sched-b runs in a network namespace; nftables drops its PostgreSQL packets for "
        "lease TTL + 0.5..4 s, mostly while it is inside a scan, at a peak"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=120)

    def setup(self, ctx: DrillContext) -> None:
        pg_port = make_url(ctx.stack.database_url).port
        kafka_port = int(ctx.stack.kafka_bootstrap.rsplit(":", 1)[1])
        ns = Namespace(tag=f"{ctx.prefix.rsplit('.', 1)[1]}", ports=(pg_port, kafka_port))
        try:
            ns.create()
        except NamespaceError as exc:
            raise DrillSetupError(str(exc)) from None
        ctx.state["namespace"] = ns
        ctx.state["postgres_port"] = pg_port

    def scheduler_spec(self, ctx: DrillContext, name: str, args: list[str]) -> ServiceSpec:
        netns = ctx.state["namespace"] if name == CUT_NODE else None
        return ServiceSpec(name, "scheduler", args, netns=netns)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        peak = ctx.peak(4.0 + rng.uniform(0, 1), self.shape().burst)
        mid_scan = rng.random() < 0.75
        if not mid_scan:
            ctx.sleep_until(int(peak.timestamp() * 1000 - rng.uniform(0, 3000)))
        else:
            ctx.sleep_until(int(peak.timestamp() * 1000 - 2500))
        hold = ctx.timings.partition_lease_ttl_ms / 1000 + rng.uniform(0.5, 4.0)
        nemesis.scheduler_cut(ctx, index, CUT_NODE, hold, mid_scan)
        nemesis.recover(ctx, 3.0)

    def heal_all(self, ctx: DrillContext) -> None:
        ns = ctx.state.get("namespace")
        if ns is not None:
            ns.heal()

    def teardown(self, ctx: DrillContext) -> None:
        ns = ctx.state.get("namespace")
        if ns is not None:
            ns.destroy()

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "scheduler_partitioned", "node": 1, "at_s": peak_s - 1.5,
             "duration_s": measured.get("scheduler_cut", 5.0)},
        ]  # fmt: skip
