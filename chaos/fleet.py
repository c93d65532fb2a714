"""The drill's fleet: the kit's services as real processes, one by one, so a drill can
kill, stop, pause and restart any of them (`cronfleet run-all` would stop them all when
one dies, which is right for a supervisor and wrong for a drill).

Each service connects to PostgreSQL with `application_name=<role>:<name>`, so the
drill's write audit (chaos.instrument) knows which node or worker wrote each row.
A worker's host dying is modelled by `kill(name, with_tasks=True)`: the worker and every
process it started (each task is its own process group) get SIGKILL together.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from chaos.netns import Namespace
from chaos.skew import ClockSkew

ROLES = ("api", "scheduler", "worker", "reaper")


@dataclass
class ServiceSpec:
    name: str  # node id, worker id, or the role for the singletons
    role: str
    args: list[str]  # after `cronfleet`
    module: str = "kit.cli"  # or a test's wrapper that plants a bug
    netns: Namespace | None = None
    skew: ClockSkew | None = None
    env: dict[str, str] = field(default_factory=dict)  # this service's own (a crash point)
    cwd: Path | None = None  # where it runs (`python -m` imports the kit found there first)

    @property
    def app_name(self) -> str:
        return f"{self.role}:{self.name}"


@dataclass
class Running:
    spec: ServiceSpec
    proc: subprocess.Popen[bytes]
    started_at: float = field(default_factory=time.time)


def with_app_name(url: str, app_name: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}application_name={quote(app_name)}"


class DrillFleet:
    def __init__(self, env: dict[str, str], database_url: str, log_dir: Path) -> None:
        self.env = env
        self.database_url = database_url
        self.log_dir = log_dir
        self.specs: dict[str, ServiceSpec] = {}
        self.running: dict[str, Running] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def argv(self, spec: ServiceSpec) -> list[str]:
        if spec.skew is not None or spec.module != "kit.cli":
            argv = [sys.executable, "-m", "chaos.launch", spec.module, *spec.args]
        else:
            argv = [sys.executable, "-m", "kit.cli", *spec.args]
        return [*(spec.netns.exec_prefix() if spec.netns else []), *argv]

    def start(self, spec: ServiceSpec) -> Running:
        if spec.name in self.running and self.alive(spec.name):
            raise RuntimeError(f"{spec.name} already runs")
        env = dict(self.env)
        env["CRONFLEET_DATABASE_URL"] = with_app_name(self.database_url, spec.app_name)
        env["PYTHONUNBUFFERED"] = "1"
        if spec.skew is not None:
            env |= spec.skew.env()
        env |= spec.env
        log = (self.log_dir / f"{spec.name}.log").open("ab")
        log.write(f"--- start {time.strftime('%H:%M:%S')}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            self.argv(spec),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=spec.cwd,
        )
        log.close()
        self.specs[spec.name] = spec
        self.running[spec.name] = Running(spec, proc)
        return self.running[spec.name]

    def restart(self, name: str) -> Running:
        return self.start(self.specs[name])

    def names(self, role: str | None = None) -> list[str]:
        return [n for n, s in self.specs.items() if role is None or s.role == role]

    def pid(self, name: str) -> int:
        return self.running[name].proc.pid

    def alive(self, name: str) -> bool:
        running = self.running.get(name)
        return running is not None and running.proc.poll() is None

    def dead_unexpectedly(self) -> list[str]:
        return [n for n in self.running if not self.alive(n)]

    def kill(self, name: str, with_tasks: bool = True) -> list[int]:
        """SIGKILL the service (and, for a host's death, every process it started).
        Returns the pids killed."""
        running = self.running[name]
        pid = running.proc.pid
        victims = descendants(pid) if with_tasks else []
        _signal_group(pid, signal.SIGKILL)
        for child in victims:
            _signal_group(child, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            running.proc.wait(timeout=10)
        return [pid, *victims]

    def stop(self, name: str, timeout_s: float = 20.0) -> None:
        running = self.running.get(name)
        if running is None or running.proc.poll() is not None:
            return
        _signal_group(running.proc.pid, signal.SIGTERM)
        try:
            running.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(name)

    def pause(self, name: str) -> None:
        _signal_group(self.pid(name), signal.SIGSTOP)

    def resume(self, name: str) -> None:
        _signal_group(self.pid(name), signal.SIGCONT)

    def stop_all(self, timeout_s: float = 20.0) -> None:
        for name in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                self.resume(name)  # a paused one cannot hear SIGTERM
        for name in list(self.running):
            running = self.running[name]
            if running.proc.poll() is None:
                _signal_group(running.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for name in list(self.running):
            running = self.running[name]
            try:
                running.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(name)

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.log_dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def wait_for(what: str, check: Callable[[], object], timeout_s: float, every_s: float = 0.2):
    """Poll `check` until it returns something true; TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def process_children() -> dict[int, list[int]]:
    """Each live process's children, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """Every live process below `pid` (children, their children, ...), from /proc, or
    from `children` (process_children) when several are looked up at once."""
    children = process_children() if children is None else children
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by `pid` (every service and task leads its own),
    and the process itself in case it left its group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
