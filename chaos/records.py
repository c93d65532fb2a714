"""What a drill saw, as plain records: the history the pure auditor (chaos.audit) judges.

Times are integer epoch milliseconds. The database's clock and the tasks' `date` read
the same host clock here (one machine); skewed services never write these times.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from chaos.ledger import LedgerLine


@dataclass(frozen=True)
class JobFacts:
    job_id: str
    name: str
    mode: str  # chaos.ledger MODES
    kind: str  # interval | cron | oneoff
    schedule: dict[str, Any]
    misfire: str
    max_attempts: int
    created_ms: int
    paused_ms: int | None = None  # when the workload stopped it (recurring jobs)


@dataclass(frozen=True, slots=True)
class RunFacts:
    run_id: str
    job_id: str
    scheduled_ms: int
    status: str
    attempt: int
    skip_reason: str | None = None
    worker_id: str | None = None
    error: str | None = None  # the kit's last error text (why a run was cancelled)
    created_ms: int | None = None
    dispatched_ms: int | None = None  # when it was last published by a worker or reaper
    priority: str | None = None  # its tier: with the worker, the consumer lane it came by


@dataclass(frozen=True, slots=True)
class Start:
    """A task start from the workers' execution journal."""

    run_id: str
    attempt: int
    at_ms: int
    worker: str


@dataclass(frozen=True, slots=True)
class Write:
    """A write recorded by the drill's database witness (chaos.instrument)."""

    seq: int
    at_ms: int
    tx_now_ms: int
    writer: str  # application_name: role:name
    kind: str  # fire | claim | finish | holder_write | reap
    partition_id: int | None = None
    lease_owner: str | None = None
    lease_epoch: int | None = None
    lease_expires_ms: int | None = None
    run_id: str | None = None
    old_status: str | None = None
    new_status: str | None = None
    old_worker: str | None = None
    new_worker: str | None = None
    old_attempt: int | None = None
    new_attempt: int | None = None
    old_lease_expires_ms: int | None = None


# Faults that can stop every scheduler from scanning (so a fire may become late and its
# misfire policy may skip it); the others leave a node that scans.
SCAN_STOPPING = frozenset({"postgres_crash", "postgres_stall", "disk_full"})


@dataclass(frozen=True)
class FaultWindow:
    kind: str  # worker_kill, scheduler_kill, scheduler_cut, postgres_crash, kafka_kill, ...
    target: str
    cycle: int
    start_ms: int
    heal_ms: int
    # no run may start twice in this fault's cycle (a stall shorter than a run lease less
    # a beat: the leases outlive it, so nothing is handed to a second worker)
    once: bool = False

    @property
    def stops_scans(self) -> bool:
        return self.kind in SCAN_STOPPING


@dataclass(frozen=True)
class Params:
    misfire_grace_ms: int
    scan_ahead_ms: int
    lag_ok_ms: int = 2000  # the kit's target: a run starts within 2 s
    recover_slack_ms: int = 15_000  # after a database outage heals, until scans resume


@dataclass(frozen=True)
class History:
    jobs: tuple[JobFacts, ...]
    runs: tuple[RunFacts, ...]
    starts: tuple[Start, ...]
    executions: tuple[LedgerLine, ...]
    effects: tuple[LedgerLine, ...]
    writes: tuple[Write, ...]
    faults: tuple[FaultWindow, ...]
    cycles: tuple[tuple[int, int], ...]  # (start_ms, end_ms) per cycle
    end_ms: int  # when the history was read (the fleet was quiet)
    params: Params
    notes: tuple[str, ...] = field(default=())


def interned(value: str | None) -> str | None:
    """One shared copy of a string the history repeats (statuses, writers, run ids across
    its records): a soak's history holds millions of them."""
    return None if value is None else sys.intern(value)
