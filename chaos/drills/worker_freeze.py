"""Drill 12: a worker freezes (SIGSTOP of the worker process alone, as in a long GC pause:
its tasks and its keeper run on in groups of their own) while one of its long tasks is
mid-work, for longer than its runs' leases and its consumer's session (so that the
runs the reaper publishes again go to the other workers), and then resumes.

Meanwhile the reaper hands its runs to other workers. Its task must be stopped at its
run's deadline by the keeper (the worker cannot), so it never acts on a run another
worker has taken (overlapping executions 0); on waking the worker says how long it was
away and what it fences, and whatever it then writes of a run it no longer holds (a
finish, a beat) is refused (stale writes 0). What it said is in the drill's notes."""

from __future__ import annotations

from typing import Any

from chaos import gray, nemesis
from chaos.drill import Drill, DrillContext
from chaos.workload import JobClass, Shape, standard_classes


class WorkerFreeze(Drill):
    number = 12
    name = "worker-freeze"
    title = "a worker frozen (SIGSTOP) past its runs' leases while its tasks are mid-work"
    summary = (
        "SIGSTOP a worker whose long task (14 s) is mid-work, for a lease, its consumer's "
        "session and 3-6 s more; "
        "its task must be stopped at its deadline, its late writes refused"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes((JobClass("long", 4, every_s=16, pre_s=14.0),)), burst=0)

    def setup(self, ctx: DrillContext) -> None:
        """Every run gets the drills' lease, unsized (kit.core.durations would lease the
        14 s runs for 21 s once five were measured, longer than the freeze): the worker
        must wake past its lease, its task stopped at its deadline, its writes refused."""
        ctx.fleet.env["CRONFLEET_RUN_LEASE_MAX_MS"] = str(ctx.timings.run_lease_ttl_ms)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        lease_s = ctx.timings.run_lease_ttl_ms / 1000
        found = gray.task_mid_work(
            ctx, min_age_s=1.2, max_age_s=2.5, watch_s=20.0, job_class="long"
        )
        if found is None:
            ctx.notes.append(f"cycle {index}: no long task mid-work; froze a worker anyway")
            victim = rng.choice([w for w in ctx.worker_names() if w not in ctx.down])
        else:
            victim = found[0]
        # past its leases and its consumer's session: its partitions (where the reaper
        # publishes its runs again) move to the others, who run them while it sleeps
        session_s = ctx.timings.worker_session_timeout_ms / 1000
        hold_s = lease_s + session_s + rng.uniform(3.0, 6.0)
        since = gray.log_size(ctx, victim)
        gray.service_freeze(ctx, index, "worker_freeze", victim, hold_s)
        nemesis.recover(ctx, lease_s + 4.0)
        said = gray.woke_lines(ctx, victim, since)
        ctx.notes.append(
            f"cycle {index}: {victim} frozen {hold_s:.1f} s; on waking it said: "
            + ("; ".join(s.split("kit.worker.worker", 1)[-1].strip() for s in said) or "nothing")
        )

    def heal_all(self, ctx: DrillContext) -> None:
        gray.thaw_all(ctx)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "worker_crash", "at_s": peak_s, "workers": 1,
             "duration_s": measured.get("worker_freeze", 7.0)},
        ]  # fmt: skip
