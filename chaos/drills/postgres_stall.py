"""Drill 10: PostgreSQL stops answering (every process of it SIGSTOPped: connections stay
open, the kernel still acknowledges bytes, nothing answers) for a seeded time from 1 s to
two run leases, then resumes, while tasks are running. Cycle by cycle the stall is:

- just shorter than one run lease less one beat (the longest stall the heartbeat rule
  promises to survive: kit.core.leases.beat_rule), begun while a long task runs, 150 ms
  before its worker's next beat (one beat after its run's lease was seen renewed): the
  stall swallows that beat;
- longer than that, up to two leases (leases may run out: runs may run again, never
  overlap, never take effect twice);
- anywhere from 1 s to a lease less a beat.

In the cycle of a stall the leases outlive, no run may start twice at all. Long tasks
(6-7 s) run through every stall, and every run has the drills' 4 s lease (not sized from
its duration: the promise is about one lease and its beat)."""

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
            JobClass("long", 3, every_s=7, pre_s=6.0),
            JobClass("longer", 3, every_s=8, pre_s=7.0),
        )
        return Shape(standard_classes(long), burst=0)

    def setup(self, ctx: DrillContext) -> None:
        """Every run gets the drills' lease, unsized (kit.core.durations would lease these
        long runs longer): the stall is measured against that one lease and its beat."""
        ctx.fleet.env["CRONFLEET_RUN_LEASE_MAX_MS"] = str(ctx.timings.run_lease_ttl_ms)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        survived_s = stall_survived_ms(ctx) / 1000
        lease_s = ctx.timings.run_lease_ttl_ms / 1000
        kind = index % 3
        if kind == 0:  # a beat of every running lease swallowed, just inside the promise
            hold_s, once = survived_s - rng.uniform(0.15, 0.3), True
        elif kind == 1:
            hold_s, once = rng.uniform(survived_s, 2 * lease_s), False
        else:
            hold_s, once = rng.uniform(1.0, survived_s - 0.05), True
        found = gray.task_mid_work(ctx, min_age_s=rng.uniform(1.0, 1.5), max_age_s=2.5)
        if found is None:
            ctx.notes.append(f"cycle {index}: no long task mid-work; stalled anyway")
        elif kind == 0:  # from just before its worker's next beat: that beat is swallowed
            beat_ms = max(200, ctx.timings.run_lease_ttl_ms // 3)
            if not gray.before_next_beat(ctx, found[1].key, beat_ms, early_ms=150):
                ctx.notes.append(f"cycle {index}: no beat of {found[0]} seen; stalled anyway")
        gray.postgres_stall(ctx, index, hold_s, once)
        nemesis.recover(ctx, 2 * lease_s + 2.0)  # what a long stall re-runs, in its cycle

    def heal_all(self, ctx: DrillContext) -> None:
        gray.thaw_all(ctx)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "db_stall", "at_s": peak_s - 0.5,
             "duration_s": measured.get("postgres_stall", 3.0)},
        ]  # fmt: skip
