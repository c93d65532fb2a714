"""What a soak watches, every few seconds, to tell a leak from a level: each process's
resident and anonymous memory, open file descriptors, threads and CPU (the share of one
core since the last sample: where the machine's time goes) for the fleet's services, the
drills' PostgreSQL and its backends, the broker's JVM and the soak itself (its ledger
target, side traffic and nemesis), the database's connections,
size, dead tuples and per-row size of the tables whose row count stays put, and the
broker's lag (messages the workers' group has not committed, every tier).

One JSON line per sample in `samples.jsonl`: {"t": epoch s, "v": {name: value}}. A value
that cannot be read this time (its process restarting, the database frozen by the
nemesis) is left out of that sample, not guessed.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, text

from chaos.fleet import DrillFleet, descendants, process_children
from chaos.stack import ChaosStack

# tables whose live rows stay about the same through a soak: their size per row is bloat
STEADY_TABLES = ("jobs", "triggers", "partition_leases", "workers", "scheduler_nodes")


def proc_status(pid: int) -> dict[str, float]:
    """rss_mb, anon_mb, threads and fds of one process (empty if it is gone)."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "VmRSS":
                out["rss_mb"] = int(value.split()[0]) / 1024
            elif key == "RssAnon":
                out["anon_mb"] = int(value.split()[0]) / 1024
            elif key == "Threads":
                out["threads"] = int(value.split()[0])
        out["fds"] = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except (OSError, ValueError):
        return {}
    return out


_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU the process has used (None if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


class Sampler:
    def __init__(
        self,
        fleet: DrillFleet,
        stack: ChaosStack,
        engine: Engine,
        lag: Callable[[], int | None],
        out: Path,
        every_s: float,
    ) -> None:
        self.fleet, self.stack, self.engine, self.lag = fleet, stack, engine, lag
        self.path = out / "samples.jsonl"
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._cpu_last: dict[int, tuple[float, float]] = {}  # pid: (monotonic s, cpu s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _loop(self) -> None:
        with self.path.open("a") as f:
            while not self._stop.wait(self.every_s):
                f.write(json.dumps({"t": round(time.time(), 3), "v": self.sample()}) + "\n")
                f.flush()

    def sample(self) -> dict[str, float]:
        values: dict[str, float] = {}
        cpu_seen: dict[int, tuple[float, float]] = {}
        tree = process_children()  # one pass over /proc for every process's descendants
        for name in self.fleet.names():
            if self.fleet.alive(name):
                pid = self.fleet.pid(name)
                for key, v in proc_status(pid).items():
                    values[f"{key}:{name}"] = v
                self._cpu(values, f"cpu:{name}", [pid, *descendants(pid, tree)], cpu_seen)
        self._cpu(values, "cpu:soak", [os.getpid()], cpu_seen)
        self._servers(values, cpu_seen, tree)
        self._cpu_last = cpu_seen
        with contextlib.suppress(Exception):  # the database frozen or down: not this time
            self._database(values)
        with contextlib.suppress(Exception):
            lag = self.lag()
            if lag is not None:
                values["broker_lag"] = lag
        return values

    def _cpu(
        self,
        values: dict[str, float],
        name: str,
        pids: list[int],
        seen: dict[int, tuple[float, float]],
    ) -> None:
        """`name`: the share of one core `pids` used since the last sample, over those
        seen both times (a process started since is counted from the next sample)."""
        used = span = 0.0
        for pid in pids:
            cpu = cpu_seconds(pid)
            if cpu is None:
                continue
            now = time.monotonic()
            seen[pid] = (now, cpu)
            if pid in self._cpu_last:
                then, before = self._cpu_last[pid]
                used += cpu - before
                span = max(span, now - then)
        if span > 0:
            values[name] = round(used / span, 4)

    def _servers(
        self,
        values: dict[str, float],
        cpu_seen: dict[int, tuple[float, float]],
        tree: dict[int, list[int]],
    ) -> None:
        """PostgreSQL: the postmaster, and its backends summed (their count varies);
        the broker's JVM."""
        root = self.stack.postgres_pid()
        if root is not None:
            for key, v in proc_status(root).items():
                values[f"{key}:postgres"] = v
            below = descendants(root, tree)
            backends = [proc_status(pid) for pid in below]
            values["anon_mb:postgres_backends"] = sum(b.get("anon_mb", 0) for b in backends)
            values["fds:postgres_backends"] = sum(b.get("fds", 0) for b in backends)
            self._cpu(values, "cpu:postgres", [root, *below], cpu_seen)
        broker = self.stack.kafka_pid()
        if broker is not None:
            for key, v in proc_status(broker).items():
                values[f"{key}:broker"] = v
            self._cpu(values, "cpu:broker", [broker], cpu_seen)

    def _database(self, values: dict[str, float]) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SET statement_timeout = '5s'"))
            values["db_connections"] = conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
            ).scalar_one()
            values["db_size_mb"] = (
                conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
                / 2**20
            )
            rows = conn.execute(
                text(
                    "SELECT relname, n_live_tup, n_dead_tup, "
                    "pg_total_relation_size(relid) AS bytes FROM pg_stat_user_tables"
                )
            ).all()
        dead = live = 0
        runs_bytes = runs_live = 0
        for name, n_live, n_dead, size in rows:
            dead += n_dead
            live += n_live
            if name in STEADY_TABLES:
                values[f"dead_tuples:{name}"] = n_dead
                values[f"kb_per_row:{name}"] = size / 1024 / max(1, n_live)
            elif name.startswith("runs"):
                runs_bytes += size
                runs_live += n_live
        values["dead_tuples:all"] = dead
        values["dead_ratio:all"] = dead / max(1, dead + live)
        if runs_live:
            values["bytes_per_run"] = runs_bytes / runs_live


def read_samples(path: Path) -> list[tuple[float, dict[str, float]]]:
    out = []
    with contextlib.suppress(FileNotFoundError), path.open() as f:
        for line in f:
            with contextlib.suppress(ValueError, KeyError):
                sample = json.loads(line)
                out.append((float(sample["t"]), dict(sample["v"])))
    return out
