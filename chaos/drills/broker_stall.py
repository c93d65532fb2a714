"""Drill 11: the broker stops answering (its JVM SIGSTOPped: it accepts TCP connections
and answers nothing) for a seeded time from 1 s to two run leases, then resumes; every
third cycle from just before the peak's publish for longer than the publish timeout
(10 s), so that the peak's publishes fail and the
reaper must find the runs whose message never went out and publish them again."""

from __future__ import annotations

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
        "cycle 12-13 s from before the peak's publish (publishes fail, the reaper republishes)"
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
            # the peak's publishes fail whatever the machine's speed, so the reaper must
            # republish them (the planted reaper_never_republishes is caught every time).
            stall_at = peak_ms - ctx.timings.scan_ahead_ms - 500
            hold_s = rng.uniform(PUBLISH_TIMEOUT_S + 2.0, PUBLISH_TIMEOUT_S + 3.0)
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
