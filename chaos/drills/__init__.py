"""The drills, by number and name: nine clean faults (machine-kill also runs against a
deployment), then six gray ones."""

from __future__ import annotations

from chaos.drill import Drill
from chaos.drills.broker_stall import BrokerStall
from chaos.drills.clock_skew import ClockSkewDrill
from chaos.drills.disk_full import DiskFull
from chaos.drills.kafka_kill import KafkaKill
from chaos.drills.machine_kill import MachineKill
from chaos.drills.node_freeze import NodeFreeze
from chaos.drills.poison_flood import PoisonFlood
from chaos.drills.postgres_crash import PostgresCrash
from chaos.drills.postgres_stall import PostgresStall
from chaos.drills.random_nemesis import RandomNemesis
from chaos.drills.scheduler_kill import SchedulerKill
from chaos.drills.scheduler_partition import SchedulerPartition
from chaos.drills.worker_cut import WorkerCut
from chaos.drills.worker_freeze import WorkerFreeze
from chaos.drills.worker_kill import WorkerKill

DRILLS: dict[str, type[Drill]] = {
    d.name: d
    for d in sorted(
        (
            WorkerKill,
            SchedulerKill,
            SchedulerPartition,
            PostgresCrash,
            KafkaKill,
            ClockSkewDrill,
            PoisonFlood,
            RandomNemesis,
            MachineKill,
            PostgresStall,
            BrokerStall,
            WorkerFreeze,
            NodeFreeze,
            DiskFull,
            WorkerCut,
        ),
        key=lambda d: d.number,
    )
}
