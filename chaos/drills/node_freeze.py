"""Drill 13: a scheduler node freezes (SIGSTOP), most often inside a scan transaction,
for longer than its partition leases, and then resumes believing it still owns them.
Another node has taken them over meanwhile (new epochs); the frozen node's transaction
is ended by the server (idle in transaction for half a lease) and whatever it writes on
waking must be refused: no fire with a stale epoch is accepted."""

from __future__ import annotations

from typing import Any

from chaos import gray, nemesis
from chaos.drill import Drill, DrillContext
from chaos.fleet import wait_for
from chaos.workload import Shape, standard_classes


class NodeFreeze(Drill):
    number = 13
    name = "node-freeze"
    title = "a scheduler node frozen (SIGSTOP) past its partition leases"
    summary = (
        "SIGSTOP a scheduler node, mostly mid-scan, for its partition lease and 0.5-4 s "
        "more, at a peak; it wakes believing it owns its partitions"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=100)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        peak = ctx.peak(4.0 + rng.uniform(0, 1), self.shape().burst)
        victim = rng.choice(ctx.scheduler_names())
        if rng.random() < 0.75:
            ctx.sleep_until(int(peak.timestamp() * 1000 - 2500))
            try:
                wait_for(
                    f"{victim} inside a scan",
                    lambda: nemesis._in_scan(ctx, victim),
                    nemesis.WATCH_S,
                    0.005,
                )
            except TimeoutError:
                ctx.notes.append(f"cycle {index}: {victim} not seen mid-scan; froze anyway")
        else:
            ctx.sleep_until(int(peak.timestamp() * 1000 - rng.uniform(0, 3000)))
        hold_s = ctx.timings.partition_lease_ttl_ms / 1000 + rng.uniform(0.5, 4.0)
        gray.service_freeze(ctx, index, "node_freeze", victim, hold_s)
        nemesis.recover(ctx, 3.0)

    def heal_all(self, ctx: DrillContext) -> None:
        gray.thaw_all(ctx)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "scheduler_crash", "node": 1, "at_s": peak_s - 1.5,
             "duration_s": measured.get("node_freeze", 5.0)},
        ]  # fmt: skip
