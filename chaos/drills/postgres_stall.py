"""Drill 10: PostgreSQL stops answering (every process of it SIGSTOPped: connections stay
open, the kernel still acknowledges bytes, nothing answers) for a seeded time from 1 s to
two run leases, then resumes, while tasks are running. Cycle by cycle the stall is:

- just shorter than one run lease less one beat (the longest stall the heartbeat rule
  promises to survive: kit.core.leases.beat_rule), begun while long tasks run, so it
  swallows a beat of every running lease whatever its phase;
- longer than that, up to two leases (leases may run out: runs may run again, never
  overlap, never take effect twice);
- anywhere from 1 s to a lease less a beat.

In the cycle of a stall the leases outlive, no run may start twice at all."""

from __future__ import annotations

from typing import Any

from chaos import gray, nemesis
from chaos.drill import Drill, DrillContext
from chaos.workload import JobClass, Shape, standard_classes
from kit.core.defaults import KILL_GRACE_MS
from kit.core.leases import beat_rule, fence_margin_ms


def stall_survived_ms(ctx: DrillContext) -> int:
    """One run lease less one beat (the worker's default beat: a third of the lease)."""
    ttl = ctx.timings.run_lease_ttl_ms
    beat = max(200, ttl // 3)
    return beat_rule(ttl, beat, fence_margin_ms(ttl, KILL_GRACE_MS)).stall_ms


class PostgresStall(Drill):
    number = 10
    name = "postgres-stall"
    title = "PostgreSQL frozen (SIGSTOP) for 1 s to two run leases, then resumed"
    summary = (
        "SIGSTOP every PostgreSQL process while long tasks run: just under a lease less a "
        "beat, longer (up to two leases), or 1 s to a lease less a beat; no run may start "
        "twice in a stall the leases outlive"
    )

    def shape(self) -> Shape:
        long = (
            JobClass("long", 3, every_s=4, pre_s=3.0),
            JobClass("longer", 3, every_s=5, pre_s=3.5),
        )
        return Shape(standard_classes(long), burst=0)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        survived_s = stall_survived_ms(ctx) / 1000
        lease_s = ctx.timings.run_lease_ttl_ms / 1000
        kind = index % 3
        if kind == 0:  # a beat of every running lease swallowed, just inside the promise
            hold_s, once = survived_s - rng.uniform(0.15, 0.4), True
        elif kind == 1:
            hold_s, once = rng.uniform(survived_s, 2 * lease_s), False
        else:
            hold_s, once = rng.uniform(1.0, survived_s - 0.05), True
        if gray.task_mid_work(ctx, min_age_s=rng.uniform(0.3, 1.5), max_age_s=2.5) is None:
            ctx.notes.append(f"cycle {index}: no long task mid-work; stalled anyway")
        gray.postgres_stall(ctx, index, hold_s, once)
        nemesis.recover(ctx, 2 * lease_s + 2.0)  # what a long stall re-runs, in its cycle

    def heal_all(self, ctx: DrillContext) -> None:
        gray.thaw_all(ctx)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "db_stall", "at_s": peak_s - 0.5,
             "duration_s": measured.get("postgres_stall", 3.0)},
        ]  # fmt: skip
