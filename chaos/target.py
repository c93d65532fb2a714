"""A deployed fleet as a drill's target (`cronfleet chaos run DRILL --target FILE`): where
its API, database and brokers are, where its workers' tasks write the ledger, and, per
machine, the commands that stop and start it.

    # target.toml
    api_url = "https://cronfleet.internal.example"   # through the api_tunnel output, say
    database_url = "env:CHAOS_DATABASE_URL"          # the owner's URL (env:VAR: from VAR)
    kafka_bootstrap = "b-1.example:9094"
    topic_prefix = "cronfleet.runs"                  # the fleet's run_topic_prefix
    worker_group = "cronfleet-workers"
    ledger_dir = "/mnt/chaos/ledger"   # written by the tasks on the workers, read here
    journal_dir = "/mnt/chaos/journal" # the workers' CRONFLEET_EXECUTION_JOURNAL_DIR

    [timings]                          # the fleet's CRONFLEET_* values the audit needs
    partitions = 1024                  # (missing: the kit's defaults)

    [machines.worker-a]
    role = "worker"
    stop = "aws ec2 stop-instances --instance-ids i-0123 --force"
    start = "aws ec2 start-instances --instance-ids i-0123"

The drill makes its token in the database (tenant `chaos`: the fleet's task policy must
let it run /bin/sh, and its tenant policy grant it the `critical` tier), installs its
write witness there for the drill's length (triggers on `runs` and `triggers`, removed
at the end), runs the same workload, and audits with the
same ledger: the tasks write it on the workers, so `ledger_dir` and `journal_dir` must be
one filesystem for the workers and this machine (a shared mount; on one host, a path).
"""

from __future__ import annotations

import os
import subprocess
import time
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from chaos.drill import Timings
from kit.core import defaults
from kit.core.errors import FieldError

ROLES = ("api", "scheduler", "worker", "reaper", "maintenance")
COMMAND_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Machine:
    name: str
    role: str
    stop: str
    start: str


@dataclass(frozen=True)
class Target:
    api_url: str
    database_url: str
    kafka_bootstrap: str
    topic_prefix: str
    worker_group: str
    ledger_dir: Path
    journal_dir: Path
    timings: Timings
    machines: dict[str, Machine] = field(default_factory=dict)

    def names(self, role: str | None = None) -> list[str]:
        return [n for n, m in self.machines.items() if role is None or m.role == role]


def kit_timings(**given: int) -> Timings:
    """The audit's timings of a fleet running the kit's defaults, with what the target
    file says in their place."""
    base = {
        "partition_lease_ttl_ms": defaults.PARTITION_LEASE_TTL_MS,
        "node_heartbeat_ms": defaults.NODE_HEARTBEAT_MS,
        "run_lease_ttl_ms": defaults.RUN_LEASE_TTL_MS,
        "reaper_period_ms": defaults.REAPER_PERIOD_MS,
        "unclaimed_grace_ms": defaults.UNCLAIMED_GRACE_MS,
        "scan_ahead_ms": defaults.SCAN_AHEAD_MS,
        "partitions": 1024,
        "topic_partitions": 6,
        "worker_session_timeout_ms": 10_000,
    }
    known = {f.name for f in fields(Timings)}
    for key, value in given.items():
        if key not in known:
            raise FieldError(f"timings.{key}", f"unknown (known: {', '.join(sorted(known))})")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise FieldError(f"timings.{key}", "a whole number, at least 1")
    return Timings(**{**base, **given})


def load_target(path: str | Path) -> Target:
    """The target file; FieldError naming the key and the reason."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as exc:
        raise FieldError("--target", f"cannot read {p}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FieldError("--target", f"{p}: {exc}") from None

    def text(key: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise FieldError(key, "missing (a string)")
        if value.startswith("env:"):
            value = os.environ.get(value[4:], "")
            if not value:
                raise FieldError(key, f"the environment variable {data[key][4:]} is not set")
        return value

    def absolute(key: str) -> Path:
        value = Path(text(key))
        if not value.is_absolute():
            raise FieldError(key, "an absolute path (the workers' tasks write there)")
        return value

    machines: dict[str, Machine] = {}
    for name, entry in (data.get("machines") or {}).items():
        if not isinstance(entry, dict):
            raise FieldError(f"machines.{name}", "a table with role, stop and start")
        role = entry.get("role")
        if role not in ROLES:
            raise FieldError(f"machines.{name}.role", f"one of {', '.join(ROLES)}")
        for key in ("stop", "start"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise FieldError(f"machines.{name}.{key}", "a shell command")
        machines[name] = Machine(name, role, entry["stop"], entry["start"])
    if not any(m.role == "worker" for m in machines.values()):
        raise FieldError("machines", "at least one worker machine (the drills stop workers)")
    timings = data.get("timings") or {}
    if not isinstance(timings, dict):
        raise FieldError("timings", "a table of the fleet's timings")
    return Target(
        api_url=text("api_url").rstrip("/"),
        database_url=text("database_url"),
        kafka_bootstrap=text("kafka_bootstrap"),
        topic_prefix=str(data.get("topic_prefix") or "cronfleet.runs"),
        worker_group=str(data.get("worker_group") or "cronfleet-workers"),
        ledger_dir=absolute("ledger_dir"),
        journal_dir=absolute("journal_dir"),
        timings=kit_timings(**timings),
        machines=machines,
    )


class TargetFleet:
    """The DrillFleet a drill acts through, for machines it does not own: killing one is
    its stop command, restarting it its start command. It knows no process of theirs (a
    drill that needs one, such as worker-kill's timing by the task's parent, cannot run
    on a target), and no machine dies "unexpectedly" for it: their own supervision
    (systemd, the Auto Scaling group) restarts them."""

    def __init__(self, target: Target, log_dir: Path) -> None:
        self.target = target
        self.log_dir = log_dir
        self.stopped: set[str] = set()
        self.running: dict[str, Any] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def names(self, role: str | None = None) -> list[str]:
        return self.target.names(role)

    def _run(self, name: str, what: str) -> None:
        machine = self.target.machines[name]
        command = machine.stop if what == "stop" else machine.start
        with (self.log_dir / f"{name}.log").open("a") as log:
            log.write(f"--- {what} {time.strftime('%H:%M:%S')}: {command}\n")
            log.flush()
            done = subprocess.run(
                command,
                shell=True,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=COMMAND_TIMEOUT_S,
            )
        if done.returncode != 0:
            raise RuntimeError(f"{name}: `{command}` exited {done.returncode}")

    def kill(self, name: str, with_tasks: bool = True) -> list[int]:
        self._run(name, "stop")
        self.stopped.add(name)
        return []

    def restart(self, name: str) -> None:
        self._run(name, "start")
        self.stopped.discard(name)

    def alive(self, name: str) -> bool:
        return name in self.target.machines and name not in self.stopped

    def pid(self, name: str) -> int:
        raise RuntimeError(f"{name}: a target's processes are not this machine's to signal")

    def dead_unexpectedly(self) -> list[str]:
        return []

    def stop_all(self, timeout_s: float = 20.0) -> None:
        """A drill's end: every machine it stopped is started again (the fleet stays)."""
        for name in sorted(self.stopped):
            self.restart(name)

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join(
                (self.log_dir / f"{name}.log").read_text(errors="replace").splitlines()[-lines:]
            )
        except OSError:
            return ""


class TargetStack:
    """What the runner asks of the drills' own stack, answered for a deployment: its
    brokers, nothing to create or drop."""

    def __init__(self, target: Target) -> None:
        self.kafka_bootstrap = target.kafka_bootstrap
        self.database_url = target.database_url

    def env(self) -> dict[str, str]:
        return {}

    def database_drop(self, name: str) -> None:
        """The deployment's database is never dropped."""
