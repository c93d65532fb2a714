"""The drills' own stack: PostgreSQL and Kafka of `cronfleet stack up`, run under a
CRONFLEET_HOME of their own, so crashing them hurts nobody else's database or broker.

Every stack operation is the kit's own CLI (`python -m kit.cli stack ...`) with that home
in the environment; the faults are what an operator's bad day does to the same
processes: `pg_ctl stop -m immediate` (a crash: no checkpoint, recovery on the next
start) and SIGKILL to the broker's JVM. A drill's database and topics are its own too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

STACK_TIMEOUT_S = 300
# Below Linux's default ephemeral range (32768-60999): see `ports_outside_ephemeral`.
SAFE_PORTS = {"postgres_port": 25432, "kafka_port": 29092, "kafka_controller_port": 29093}


class StackFailure(RuntimeError):
    """The drills' stack cannot be brought up or faulted as asked."""


def default_home() -> Path:
    """$CRONFLEET_HOME/chaos-stack: beside the user's own stack, never the same one."""
    base = Path(os.environ.get("CRONFLEET_HOME", Path.home() / ".cronfleet")).expanduser()
    return base / "chaos-stack"


def base_env() -> dict[str, str]:
    """The caller's environment without the connection settings of another stack."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("CRONFLEET_DATABASE_URL", "CRONFLEET_KAFKA_BOOTSTRAP")
    }


@dataclass
class ChaosStack:
    home: Path
    database_url: str = ""
    kafka_bootstrap: str = ""

    def env(self) -> dict[str, str]:
        return base_env() | {"CRONFLEET_HOME": str(self.home)}

    def _stack(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "kit.cli", "stack", *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=STACK_TIMEOUT_S,
        )
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            tail = "\n".join(lines[-8:])
            raise StackFailure(f"stack {' '.join(args)} (home {self.home}): {tail}")
        return done.stdout

    def up(self) -> None:
        """Start (or find running) the drills' PostgreSQL and Kafka; learn their addresses."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._seed_kafka_jars()
        self._ports_outside_ephemeral()
        out = self._stack("up")
        found = dict(re.findall(r"^(CRONFLEET_[A-Z_]+)=(.*)$", out, re.MULTILINE))
        self.database_url = found["CRONFLEET_DATABASE_URL"]
        self.kafka_bootstrap = found["CRONFLEET_KAFKA_BOOTSTRAP"]

    def down(self) -> None:
        self._stack("down")

    def _ports_outside_ephemeral(self) -> None:
        """Give the stack ports below the ephemeral range before it starts (moving a stack
        that has ports inside it: down, new ports, up)."""
        state_path = self.home / "stack.json"
        try:
            state = json.loads(state_path.read_text())
        except (OSError, ValueError):
            state = {}
        wanted = ports_outside_ephemeral(state, ephemeral_range(), _port_free)
        if wanted == {k: state.get(k) for k in wanted}:
            return
        if state:
            with contextlib.suppress(StackFailure):
                self.down()
        state_path.write_text(json.dumps(state | wanted, indent=2, sort_keys=True) + "\n")

    def _seed_kafka_jars(self) -> None:
        """Copy the broker's jars from the caller's own stack when it has them, so the
        drills' stack does not ask Maven again (the stamp file says the copy is whole)."""
        source_home = Path(os.environ.get("CRONFLEET_HOME", Path.home() / ".cronfleet"))
        for lib in sorted((source_home.expanduser() / "kafka").glob("lib-*")):
            target = self.home / "kafka" / lib.name
            if (lib / ".complete").exists() and not (target / ".complete").exists():
                shutil.rmtree(target, ignore_errors=True)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(lib, target)

    # -- PostgreSQL ---------------------------------------------------------------------

    @property
    def pg_data(self) -> Path:
        return self.home / "postgres" / "data"

    def postgres_pid(self) -> int | None:
        try:
            pid = int((self.pg_data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _cmdline_has(pid, "postgres") else None

    def postgres_crash(self) -> None:
        """`pg_ctl stop -m immediate`: every backend dies at once, no checkpoint."""
        from kit.stack.postgres import as_postgres, server_bin_dir

        if self.postgres_pid() is None:
            raise StackFailure(f"postgres of {self.home} is not running; nothing to crash")
        pg_ctl = server_bin_dir(install=False) / "pg_ctl"
        as_postgres(pg_ctl, "-D", str(self.pg_data), "-m", "immediate", "-w", "-t", "30", "stop")
        if self.postgres_pid() is not None:
            raise StackFailure("postgres: still running after pg_ctl stop -m immediate")

    def postgres_start(self) -> None:
        self._stack("up", "--only", "postgres")

    # -- Kafka --------------------------------------------------------------------------

    def kafka_pid(self) -> int | None:
        try:
            pid = int((self.home / "kafka" / "kafka.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        config = str(self.home / "kafka" / "server.properties")
        return pid if _cmdline_has(pid, config) else None

    def kafka_kill(self) -> None:
        """SIGKILL to the broker's JVM (its own process group), then wait until it is gone."""
        pid = self.kafka_pid()
        if pid is None:
            raise StackFailure(f"kafka of {self.home} is not running; nothing to kill")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self.kafka_pid() is not None:
            if time.monotonic() > deadline:
                raise StackFailure(f"kafka pid {pid} survived SIGKILL for 30 s")
            time.sleep(0.1)

    def kafka_start(self) -> None:
        self._stack("up", "--only", "kafka")

    def kafka_forget(self, topic_prefix: str, group_prefix: str) -> list[str]:
        """Delete the topics and consumer groups named so (kit.transport.topics_forget): a
        drill's own when it ends, and at a drill's start those every earlier drill left
        (one stopped half-way leaves them too). A broker reads every partition it holds
        when it starts: the leftovers of 358 drills (4,586 partitions) took 32 s of one
        restart after a broker kill (its log, 14:08:11 to 14:08:43). Returns the topics
        deleted."""
        from kit.transport.topics import topics_forget

        return topics_forget(self.kafka_bootstrap, topic_prefix, group_prefix)

    # -- a drill's database -------------------------------------------------------------

    def admin_url(self) -> str:
        return self.database_url

    def database_create(self, name: str) -> str:
        """A fresh database for one drill (any older one of that name dropped); its URL."""
        engine = create_engine(self.database_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return make_url(self.database_url).set(database=name).render_as_string(hide_password=False)

    def database_drop(self, name: str) -> None:
        engine = create_engine(self.database_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            engine.dispose()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (Linux's default if unknown)."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def ports_outside_ephemeral(
    state: dict[str, int],
    ephemeral: tuple[int, int],
    free: Callable[[int], bool],
) -> dict[str, int]:
    """The stack's ports, each kept if outside the ephemeral range, else moved to the first
    free one from SAFE_PORTS below it. A client reconnecting to 127.0.0.1:P while nothing
    listens there (the drill killed the broker or crashed PostgreSQL) is given ephemeral
    source ports; when it is given P itself the connection is made to itself (TCP
    simultaneous open) and holds P, so the restarted server cannot bind its port and the
    drill's stack stays down (found by the kafka-kill drill: a reaper held 59106 -> 59106)."""
    lo, hi = ephemeral
    chosen: dict[str, int] = {}
    for name, preferred in SAFE_PORTS.items():
        current = state.get(name)
        if isinstance(current, int) and not lo <= current <= hi:
            chosen[name] = current
            continue
        port = preferred
        while port < lo and (port in chosen.values() or not free(port)):
            port += 1
        if port >= lo:
            raise StackFailure(f"no free port for {name} below the ephemeral range ({lo})")
        chosen[name] = port
    return chosen


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cmdline_has(pid: int, marker: str) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker in raw.replace(b"\0", b" ").decode(errors="replace")
