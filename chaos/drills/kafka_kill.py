"""Drill 5: the Kafka broker dies (SIGKILL to its JVM) around a peak and is started
again after a seeded pause: nothing can be published or consumed until it is back."""

from __future__ import annotations

from typing import Any

from chaos import nemesis
from chaos.drill import Drill, DrillContext
from chaos.workload import Shape, standard_classes


class KafkaKill(Drill):
    number = 5
    name = "kafka-kill"
    title = "Kafka broker SIGKILL and restart"
    summary = (
        "SIGKILL the broker's JVM from 2 s before a peak to 1 s after; start it again "
        "0.5-4 s later (the drills' own stack; the JVM takes its own time to come up)"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=80)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        peak = ctx.peak(5.0 + rng.uniform(0, 1), self.shape().burst)
        ctx.sleep_until(int(peak.timestamp() * 1000 - rng.uniform(-1000, 2000)))
        nemesis.kafka_kill(ctx, index, rng.uniform(0.5, 4.0))
        nemesis.recover(ctx, 5.0)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "broker_outage", "at_s": peak_s - 0.5,
             "duration_s": measured.get("kafka_kill", 15.0)},
        ]  # fmt: skip
