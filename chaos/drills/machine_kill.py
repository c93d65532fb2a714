"""Drill 9: a machine of the fleet is lost and comes back: a worker's or a scheduler node's,
stopped whole (its service and the tasks it runs) at a seeded moment while the workload
runs, started again after a seeded pause. On the drills' own stack a machine is a
service's process; against a deployment (`--target FILE`) it is the target file's stop
and start commands (`aws ec2 stop-instances`, `ssh host systemctl stop ...`), so this is
the drill that runs on a deployed fleet."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from chaos import nemesis
from chaos.drill import Drill, DrillContext
from chaos.fleet import wait_for
from chaos.workload import JobClass, Shape, standard_classes

BOOT_TIMEOUT_S = 900.0  # a stopped instance started again, booted, its service up
# the presence each role's service keeps in the database, beating every few seconds
PRESENCE = {"worker": "workers", "scheduler": "scheduler_nodes"}


class MachineKill(Drill):
    number = 9
    name = "machine-kill"
    title = "a worker's or scheduler node's machine stopped and started again"
    summary = (
        "stop a seeded worker or scheduler machine (service and tasks) mid-workload, start "
        "it 1-4 s later; with --target, by the target file's stop and start commands"
    )
    on_target = True

    def shape(self) -> Shape:
        extra = (JobClass("long", 2, every_s=2, pre_s=1.5),)
        return Shape(standard_classes(extra), burst=0)

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        roles = ["worker"] + (["scheduler"] if len(ctx.scheduler_names()) > 1 else [])
        victim = rng.choice(ctx.fleet.names(rng.choice(roles)))
        down_s = rng.uniform(1.0, 4.0)
        ctx.sleep_until(ctx.now_ms() + int(rng.uniform(0.5, 2.0) * 1000))
        role = next(r for r in roles if victim in ctx.fleet.names(r))
        with ctx.fault("machine_kill", victim, index):
            ctx.kill(victim, with_tasks=True)
            ctx.sleep_until(ctx.now_ms() + int(down_s * 1000))
            since = _db_now(ctx)
            ctx.restart(victim)
            # the machine is back when its role has as many live services as machines:
            # a start command returns long before an instance has booted
            wait_for(
                f"{victim} back",
                lambda: _beating_since(ctx, role, since) >= len(ctx.fleet.names(role)),
                BOOT_TIMEOUT_S,
                0.5,
            )
        nemesis.recover(ctx, ctx.timings.run_lease_ttl_ms / 1000 + 1.5)

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "worker_crash", "at_s": peak_s, "workers": 1,
             "duration_s": measured.get("machine_kill", 2.5)},
        ]  # fmt: skip


def _db_now(ctx: DrillContext) -> object:
    with ctx.engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


def _beating_since(ctx: DrillContext, role: str, since: object) -> int:
    with ctx.engine.connect() as conn:
        return int(
            conn.execute(
                text(f"SELECT count(*) FROM {PRESENCE[role]} WHERE heartbeat_at > :since"),
                {"since": since},
            ).scalar_one()
        )
