"""The drill's workload, created through the kit's HTTP API like any tenant would: interval
and cron jobs that run for the whole drill, and bursts of one-off jobs that make a peak
(many runs due in one second, the top-of-the-minute load) where a drill wants one.

What each job's task does is chaos.ledger's TASK_SCRIPT, in one of its modes. Jobs are
named `<mode>-<class>-<n>`, so the auditor knows from the name what each one should
have done.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from chaos.ledger import POISON_MODES, task_spec

HEALTHY_RETRY = {"max_attempts": 25, "base_s": 0.2, "cap_s": 2.0, "jitter": "none"}
POISON_RETRY = {"max_attempts": 2, "base_s": 0.2, "cap_s": 1.0, "jitter": "none"}
TENANT = "chaos"
TIERS = ("critical", "high", "normal", "low")


@dataclass(frozen=True)
class JobClass:
    """`count` jobs alike: a schedule (every_s, or cron), a task mode, how long the task
    works before and after its effect, the misfire and overlap policies, the attempts
    a run may take (None: the healthy or poison budget below), and whether its dead
    letters may pause it (a poison job's never do)."""

    name: str
    count: int
    mode: str = "key"
    every_s: int | None = 2
    cron: str | None = None
    pre_s: float = 0.0
    window_s: float = 0.0
    misfire: str = "run_all"
    timeout_s: int = 30
    http_url: str | None = None  # an http task to this target (chaos.httpledger), not sh
    overlap: str = "allow"
    max_attempts: int | None = None
    auto_pause: bool = True  # False: pause_after_dead 0, its dead letters never pause it

    def body(self, ledger: Path, index: int, rng: random.Random) -> dict[str, Any]:
        schedule: dict[str, Any] = (
            {"cron": self.cron, "timezone": "UTC"} if self.cron else {"every_s": self.every_s}
        )
        misfire: dict[str, Any] = {"kind": self.misfire}
        if self.misfire == "skip_late":
            misfire["deadline_s"] = 5
        poison = self.mode in POISON_MODES
        retry = dict(POISON_RETRY if poison else HEALTHY_RETRY)
        if self.max_attempts is not None:
            retry["max_attempts"] = self.max_attempts
        return {
            "name": f"{self.mode}-{self.name}-{index}",
            "schedule": schedule,
            "task": (
                {"type": "http", "url": f"{self.http_url}/effect", "method": "POST"}
                if self.http_url
                else task_spec(ledger, self.mode, self.pre_s, self.window_s)
            ),
            "retry": retry,
            "timeout_s": 2 if self.mode == "hang" else self.timeout_s,
            "overlap": self.overlap,
            "misfire": misfire,
            "priority": rng.choice(TIERS),
            # a poison job dies every run: the drill audits each dead letter, so it opts
            # out of the auto-pause the operator's default would apply
            **({"pause_after_dead": 0} if poison or not self.auto_pause else {}),
        }


@dataclass(frozen=True)
class Shape:
    """What a drill runs: recurring job classes and the size of each cycle's burst."""

    classes: tuple[JobClass, ...]
    burst: int = 0  # one-off jobs due in the same second, once per cycle
    burst_pre_s: float = 0.0


def standard_classes(extra: tuple[JobClass, ...] = ()) -> tuple[JobClass, ...]:
    """The mix every drill runs: mostly key-honouring interval jobs, some that work a
    little before their effect, some that ignore the key, cron jobs at the top of each
    minute, and jobs whose late fires the misfire policy may skip."""
    return (
        JobClass("fast", 8, every_s=2),
        JobClass("slow", 3, every_s=3, pre_s=0.8),
        JobClass("naive", 2, mode="naive", every_s=2),
        JobClass("minute", 6, every_s=None, cron="* * * * *"),
        JobClass("once", 2, every_s=2, misfire="run_once"),
        JobClass("late", 1, every_s=2, misfire="skip_late"),
        *extra,
    )


@dataclass
class CreatedJob:
    job_id: str
    name: str
    mode: str
    kind: str  # interval | cron | oneoff
    schedule: dict[str, Any]
    misfire: str
    max_attempts: int
    created_ms: int


@dataclass
class Workload:
    api: httpx.Client
    ledger: Path
    rng: random.Random
    jobs: dict[str, CreatedJob] = field(default_factory=dict)
    _bursts: int = 0

    def _create(self, bodies: list[dict[str, Any]]) -> list[str]:
        """All or nothing per call (the batch route); job ids in the order of `bodies`."""
        ids: list[str] = []
        for start in range(0, len(bodies), 500):
            chunk = bodies[start : start + 500]
            answer = self.api.post("/v1/jobs:batch", json={"jobs": chunk})
            if answer.status_code != 201:
                raise RuntimeError(f"creating jobs: {answer.status_code} {answer.text[:300]}")
            ids += answer.json()["job_ids"]
        return ids

    def _remember(self, job_id: str, kind: str) -> None:
        """The job as the kit stored it: its interval's anchor and its creation instant
        decide its fires (kit.store.jobs: the first is next_fire(schedule, created_at))."""
        job = self.api.get(f"/v1/jobs/{job_id}")
        job.raise_for_status()
        data = job.json()
        self.jobs[job_id] = CreatedJob(
            job_id=job_id,
            name=data["name"],
            mode=data["name"].split("-", 1)[0],
            kind=kind,
            schedule=data["schedule"],
            misfire=data["misfire"]["kind"],
            max_attempts=int(data["retry"]["max_attempts"]),
            created_ms=_ms(data["created_at"]),
        )

    def create_recurring(self, shape: Shape) -> None:
        bodies: list[dict[str, Any]] = []
        kinds: list[str] = []
        for cls in shape.classes:
            for i in range(cls.count):
                bodies.append(cls.body(self.ledger, i, self.rng))
                kinds.append("cron" if cls.cron else "interval")
        for job_id, kind in zip(self._create(bodies), kinds, strict=True):
            self._remember(job_id, kind)

    def burst(self, at: datetime, size: int, pre_s: float = 0.0, mode: str = "key") -> None:
        """`size` one-off jobs all due at `at` (a peak)."""
        self._bursts += 1
        at_iso = at.astimezone(UTC).isoformat()
        names = [f"{mode}-burst{self._bursts}-{i}" for i in range(size)]
        poison = mode in POISON_MODES
        bodies = [
            {
                "name": name,
                "schedule": {"at": at_iso},
                "task": task_spec(self.ledger, mode, pre_s),
                "retry": POISON_RETRY if poison else HEALTHY_RETRY,
                "timeout_s": 2 if mode == "hang" else 30,
                "priority": self.rng.choice(TIERS),
                **({"pause_after_dead": 0} if poison else {}),
            }
            for name in names
        ]
        created_ms = int(datetime.now(UTC).timestamp() * 1000)
        for job_id, name in zip(self._create(bodies), names, strict=True):
            retry = POISON_RETRY if poison else HEALTHY_RETRY
            self.jobs[job_id] = CreatedJob(
                job_id, name, mode, "oneoff", {"at": at_iso}, "run_once",
                int(retry["max_attempts"]), created_ms,
            )  # fmt: skip

    def pause_all(self) -> None:
        """Stop the recurring jobs (the end of the workload); their pause time is read
        back from the database by the history."""
        for job in self.jobs.values():
            if job.kind == "oneoff":
                continue
            answer = self.api.patch(f"/v1/jobs/{job.job_id}", json={"paused": True})
            if answer.status_code != 200:
                raise RuntimeError(f"pausing {job.name}: {answer.status_code} {answer.text[:200]}")


def _ms(iso: str) -> int:
    instant = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return int(instant.timestamp() * 1000)


def at_second(now: datetime, ahead_s: float) -> datetime:
    """The whole second at least `ahead_s` from `now`: where a burst is due."""
    target = now + timedelta(seconds=ahead_s)
    return target.replace(microsecond=0) + timedelta(seconds=1)
