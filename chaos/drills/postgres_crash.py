"""Drill 4: PostgreSQL crashes (`pg_ctl stop -m immediate`: every backend gone, no
checkpoint) around a peak and is started again after a seeded pause: every service
loses its database at once; the database recovers from its WAL."""

from __future__ import annotations

from typing import Any

from chaos import nemesis
from chaos.drill import Drill, DrillContext
from chaos.workload import Shape, standard_classes


class PostgresCrash(Drill):
    number = 4
    name = "postgres-crash"
    title = "PostgreSQL crash and restart"
    summary = (
        "pg_ctl stop -m immediate from 2 s before a peak to 1 s after; start it again "
        "0.5-8 s later (the drills' own stack)"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=80)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        peak = ctx.peak(5.0 + rng.uniform(0, 1), self.shape().burst)
        ctx.sleep_until(int(peak.timestamp() * 1000 - rng.uniform(-1000, 2000)))
        nemesis.postgres_crash(ctx, index, rng.uniform(0.5, 8.0))
        nemesis.recover(ctx, 4.0)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "db_stall", "at_s": peak_s - 0.5,
             "duration_s": measured.get("postgres_crash", 5.0)},
        ]  # fmt: skip
