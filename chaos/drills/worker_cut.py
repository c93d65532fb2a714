"""Drill 15: a worker cut off from one half of the stack. It runs in a network namespace
of the drill's own; nftables drops its packets to and from PostgreSQL (its broker link
stays up) while one of its long tasks is mid-work, for longer than its runs' leases; or,
the next cycle, to and from the broker (its database link stays up: it beats and
finishes what it holds, and its consumer group moves its partitions to the others).

Cut from the database it can confirm no lease: it must stop its task before the lease
it last confirmed runs out, so the run handed to another worker never overlaps it."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url

from chaos import gray, nemesis
from chaos.drill import Drill, DrillContext, DrillSetupError
from chaos.fleet import ServiceSpec
from chaos.netns import Namespace, NamespaceError
from chaos.workload import JobClass, Shape, standard_classes

CUT_WORKER = "w3"


class WorkerCut(Drill):
    number = 15
    name = "worker-cut"
    title = "a worker cut off from PostgreSQL but not the broker, and the reverse"
    summary = (
        "w3 in a network namespace; nftables drops its PostgreSQL packets for a lease and "
        "0.5-4 s more while its long task runs, or (odd cycles) its broker packets for 3-12 s"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes((JobClass("long", 12, every_s=22, pre_s=20.0),)), burst=0)

    def setup(self, ctx: DrillContext) -> None:
        # Every run gets the drills' lease, unsized: kit.core.durations leases a job of
        # 20 s runs for 30 s once five were measured, and a cut of one drills' lease and a
        # few seconds would then end with the lease still held (nothing to take back, and
        # a worker that does not fence goes unseen).
        ctx.fleet.env["CRONFLEET_RUN_LEASE_MAX_MS"] = str(ctx.timings.run_lease_ttl_ms)
        pg_port = make_url(ctx.stack.database_url).port
        kafka_port = int(ctx.stack.kafka_bootstrap.rsplit(":", 1)[1])
        ns = Namespace(tag=f"{ctx.prefix.rsplit('.', 1)[1]}", ports=(pg_port, kafka_port))
        try:
            ns.create()
        except NamespaceError as exc:
            raise DrillSetupError(str(exc)) from None
        ctx.state["namespace"] = ns
        ctx.state["ports"] = {"postgres": pg_port, "broker": kafka_port}

    def worker_spec(self, ctx: DrillContext, name: str, args: list[str]) -> ServiceSpec:
        netns = ctx.state["namespace"] if name == CUT_WORKER else None
        return ServiceSpec(name, "worker", args, netns=netns)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        lease_s = ctx.timings.run_lease_ttl_ms / 1000
        ns: Namespace = ctx.state["namespace"]
        if index % 2 == 0:
            link, hold_s = "postgres", lease_s + rng.uniform(0.5, 4.0)
            if (
                gray.task_mid_work(
                    ctx, CUT_WORKER, min_age_s=1.2, max_age_s=3.0, watch_s=30.0, job_class="long"
                )
                is None
            ):
                ctx.notes.append(f"cycle {index}: no long task of {CUT_WORKER}; cut anyway")
        else:
            link, hold_s = "broker", rng.uniform(3.0, 12.0)
        with ctx.fault(f"worker_cut_{link}", f"{CUT_WORKER} {hold_s:.2f}s", index):
            ns.cut(ctx.state["ports"][link])
            try:
                ctx.sleep_until(ctx.now_ms() + int(hold_s * 1000))
            finally:
                ns.heal()
        nemesis.recover(ctx, lease_s + 4.0)

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
            {"kind": "worker_crash", "at_s": peak_s, "workers": 1,
             "duration_s": measured.get("worker_cut_postgres", 6.0)},
        ]  # fmt: skip
