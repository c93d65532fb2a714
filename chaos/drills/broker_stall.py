"""Drill 11: the broker stops answering (its JVM SIGSTOPped: it accepts TCP connections
and answers nothing) for a seeded time from 1 s to two run leases, then resumes; every
third cycle from just before the peak's publish for longer than the publish timeout
(10 s), so that the peak's publishes fail, and both scheduler nodes are killed while it
lasts: a node keeps the runs the broker did not confirm and sends them when it answers
(kit.core.unsent), so only a node that dies meanwhile leaves the reaper runs whose
message never went out, to find and publish again."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from chaos import gray, nemesis
from chaos.drill import Drill, DrillContext
from chaos.workload import Shape, standard_classes

PUBLISH_TIMEOUT_S = 10.0  # kit.transport.publisher: RunPublisher.publish_encoded


class BrokerStall(Drill):
    number = 11
    name = "broker-stall"
    title = "Kafka broker frozen (SIGSTOP) for 1 s to two run leases, or past the publish timeout"
    summary = (
        "SIGSTOP the broker's JVM around a peak for 1 s to two run leases; every third "
        "cycle 12-13 s from before the peak's publish, and the scheduler nodes killed once "
        "it failed (the runs they kept unsent are the reaper's to publish)"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=60)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        lease_s = ctx.timings.run_lease_ttl_ms / 1000
        peak = ctx.peak(4.0 + rng.uniform(0, 1), self.shape().burst)
        peak_ms = int(peak.timestamp() * 1000)
        if index % 3 == 1:
            # Frozen half a second before the scan that takes the peak (a scan a second,
            # `scan_ahead_ms` ahead) and for longer than that scan's publish can wait:
            # the peak's publishes fail whatever the machine's speed. The nodes keep
            # those runs to send again; killed before the broker answers, they leave
            # them to the reaper (the planted reaper_never_republishes is caught).
            stall_at = peak_ms - ctx.timings.scan_ahead_ms - 500
            hold_s = rng.uniform(PUBLISH_TIMEOUT_S + 2.0, PUBLISH_TIMEOUT_S + 3.0)
            ctx.sleep_until(stall_at)
            with contextlib.ExitStack() as nodes_down:
                gray.broker_stall(ctx, index, hold_s, lambda: _kill_nodes(ctx, index, nodes_down))
                for node in ctx.scheduler_names():
                    ctx.restart(node)
        else:
            stall_at = int(peak_ms - rng.uniform(-500, 2500))
            hold_s = rng.uniform(1.0, 2 * lease_s)
            ctx.sleep_until(stall_at)
            gray.broker_stall(ctx, index, hold_s)
        nemesis.recover(ctx, ctx.timings.unclaimed_grace_ms / 1000 + 6.0)

    def heal_all(self, ctx: DrillContext) -> None:
        gray.thaw_all(ctx)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "broker_outage", "at_s": peak_s - 0.5,
             "duration_s": measured.get("broker_stall", 5.0)},
        ]  # fmt: skip


def _kill_nodes(ctx: DrillContext, cycle: int, down: contextlib.ExitStack) -> None:
    """While the broker is frozen, once the peak's publish has failed: SIGKILL every
    scheduler node, and with them the runs they kept to send again. The fault lasts
    until `down` closes (the nodes restarted when the broker thaws)."""
    time.sleep(PUBLISH_TIMEOUT_S + 1.0)
    nodes = ctx.scheduler_names()
    down.enter_context(ctx.fault("scheduler_kill", ", ".join(nodes), cycle))
    for node in nodes:
        ctx.kill(node, with_tasks=False)
