"""`cronfleet run-all`: the whole kit on one machine, for a single-box install or a demo.

Runs `cronfleet db upgrade`, then starts the api, one scheduler, N workers, a reaper
and the maintenance service (expiry of keys, finished queue tasks, dead letters) as child
processes (`python -m kit.cli ...`), each line of their output prefixed with
its name. SIGTERM or SIGINT is forwarded to every child, which drains (the worker
finishes in-flight runs, the scheduler dispatches what it holds and releases its
leases); after --stop-timeout-s a straggler is killed. If a child exits on its own the
others are stopped and run-all exits 1: a half-running fleet is worse than none,
because the supervisor that restarts run-all cannot see it.

Metrics: with --metrics-base-port P the scheduler serves Prometheus on P, the reaper
on P+1, worker i on P+2+i and maintenance on P+2+N (the api serves its own on /metrics).
0 turns them off.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

_PR_SET_PDEATHSIG = 1
try:  # resolved in the parent: after fork, in a threaded parent, only call it
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM if run-all itself dies (even by SIGKILL),
    so a killed supervisor leaves no orphaned services behind."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True)
class Service:
    """One child: its name (the output prefix) and its argv after `python -m kit.cli`,
    or a full `command` (used by the benchmark to run a service under a profiler)."""

    name: str
    args: tuple[str, ...]
    command: tuple[str, ...] | None = None

    def argv(self) -> list[str]:
        if self.command is not None:
            return list(self.command)
        return [sys.executable, "-m", "kit.cli", *self.args]


@dataclass
class Child:
    service: Service
    proc: subprocess.Popen[bytes]
    reader: threading.Thread | None = None
    expected_exit: bool = False


@dataclass
class Fleet:
    """Child processes started together, watched together and stopped together."""

    out: IO[str] = field(default_factory=lambda: sys.stdout)
    env: dict[str, str] | None = None
    children: list[Child] = field(default_factory=list)
    _write_lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, service: Service) -> Child:
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        proc = subprocess.Popen(
            service.argv(),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C reaches run-all only; it forwards
            preexec_fn=_die_with_parent,
        )
        child = Child(service, proc)
        child.reader = threading.Thread(
            target=self._forward, args=(child,), name=f"out-{service.name}", daemon=True
        )
        child.reader.start()
        self.children.append(child)
        return child

    def _forward(self, child: Child) -> None:
        assert child.proc.stdout is not None
        prefix = f"{child.service.name:<10}| "
        for raw in iter(child.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._write_lock:
                self.out.write(prefix + line + "\n")
                self.out.flush()

    def say(self, line: str) -> None:
        with self._write_lock:
            self.out.write(f"{'run-all':<10}| {line}\n")
            self.out.flush()

    def pids(self) -> list[int]:
        return [c.proc.pid for c in self.children]

    def dead(self) -> list[Child]:
        """Children that exited without being asked to."""
        return [c for c in self.children if c.proc.poll() is not None and not c.expected_exit]

    def stop(self, timeout_s: float, sig: int = signal.SIGTERM) -> bool:
        """Signal every live child, wait up to `timeout_s` for all, kill stragglers.
        True when every child exited on its own with code 0."""
        for child in self.children:
            child.expected_exit = True
            child.proc.send_signal(sig)  # a no-op for one already reaped
        deadline = time.monotonic() + timeout_s
        clean = True
        for child in self.children:
            try:
                child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"{child.service.name} did not stop in {timeout_s:.0f} s: killing it")
                child.proc.kill()
                child.proc.wait(timeout=10)
                clean = False
                continue
            # uvicorn re-raises the signal it handled: dying of it is a clean stop too
            if child.proc.returncode not in (0, -sig):
                self.say(f"{child.service.name} exited with code {child.proc.returncode}")
                clean = False
        for child in self.children:
            if child.reader is not None:
                child.reader.join(timeout=5)
        return clean


def services(args: argparse.Namespace) -> list[Service]:
    """What run-all starts, in start order (api first: it is what a user looks at)."""
    common: list[str] = []
    if args.topic_prefix:
        common += ["--topic-prefix", args.topic_prefix]
    base = args.metrics_base_port

    def metrics(offset: int) -> list[str]:
        return ["--metrics-port", str(base + offset)] if base else []

    api = ["api", *common]
    if args.group_id:
        api += ["--group-id", args.group_id]  # the fleet view reads the workers' lag
    if args.api_host:
        api += ["--host", args.api_host]
    if args.api_port:
        api += ["--port", str(args.api_port)]
    out = [Service("api", tuple(api))]
    out.append(Service("scheduler", ("scheduler", *metrics(0), *common)))
    reaper = ["reaper", *metrics(1), *common]
    if args.group_id:
        reaper += ["--group-id", args.group_id]
    out.append(Service("reaper", tuple(reaper)))
    for i in range(args.workers):
        worker = ["worker", *metrics(2 + i), *common, "--drain-s", str(args.drain_s)]
        if args.concurrency is not None:
            worker += ["--concurrency", str(args.concurrency)]
        if args.prefetch is not None:
            worker += ["--prefetch", str(args.prefetch)]
        if args.group_id:
            worker += ["--group-id", args.group_id]
        out.append(Service(f"worker-{i + 1}" if args.workers > 1 else "worker", tuple(worker)))
    out.append(Service("maintenance", ("maintenance", *metrics(2 + args.workers))))
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run-all",
        help="one-machine install: db upgrade, then api, scheduler, workers, reaper, maintenance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--concurrency", type=int, help="runs per worker (default: settings)")
    parser.add_argument(
        "--prefetch", type=int, help="runs a worker claims ahead (default: settings)"
    )
    parser.add_argument("--api-host", help="api bind address (default: settings.api_host)")
    parser.add_argument("--api-port", type=int, help="api port (default: settings.api_port)")
    parser.add_argument(
        "--metrics-base-port",
        type=int,
        default=0,
        help="scheduler P, reaper P+1, worker i P+2+i, maintenance P+2+N (0 = none)",
    )
    parser.add_argument("--topic-prefix", help="run topic prefix (default cronfleet.runs)")
    parser.add_argument("--group-id", help="workers' Kafka consumer group (default: settings)")
    parser.add_argument(
        "--drain-s", type=float, default=30.0, help="how long workers finish in-flight runs"
    )
    parser.add_argument(
        "--stop-timeout-s",
        type=float,
        default=45.0,
        help="after SIGTERM, kill a child still running after this long",
    )
    parser.add_argument("--skip-upgrade", action="store_true", help="do not run db upgrade")
    parser.set_defaults(func=run)


def check(args: argparse.Namespace) -> None:
    from kit.core.errors import UsageError

    if not 0 <= args.workers <= 64:
        raise UsageError(f"workers: {args.workers} is not between 0 and 64")
    if args.concurrency is not None and not 1 <= args.concurrency <= 1024:
        raise UsageError(f"concurrency: {args.concurrency} is not between 1 and 1024")
    if args.api_port is not None and not 1 <= args.api_port <= 65535:
        raise UsageError(f"api-port: {args.api_port} is not between 1 and 65535")
    last = args.metrics_base_port + 2 + args.workers
    if args.metrics_base_port < 0 or last > 65535:
        raise UsageError(f"metrics-base-port: ports {args.metrics_base_port}..{last} not valid")
    if args.drain_s < 0 or args.stop_timeout_s <= 0:
        raise UsageError("stop-timeout-s: must be positive (and drain-s not negative)")


def upgrade(fleet: Fleet) -> int:
    """`cronfleet db upgrade` as a child, its output prefixed like the services'."""
    child = fleet.start(Service("db", ("db", "upgrade")))
    code = child.proc.wait()
    child.expected_exit = True
    if child.reader is not None:
        child.reader.join(timeout=5)
    fleet.children.remove(child)
    return code


def supervise(fleet: Fleet, stop: threading.Event, stop_timeout_s: float) -> int:
    """Until `stop` or a child's unexpected exit; then stop them all."""
    while not stop.wait(0.2):
        dead = fleet.dead()
        if dead:
            for child in dead:
                fleet.say(
                    f"{child.service.name} exited unexpectedly (code {child.proc.returncode}); "
                    "stopping the others"
                )
            fleet.stop(stop_timeout_s)
            return 1
    fleet.say("stopping: signal forwarded to every service")
    return 0 if fleet.stop(stop_timeout_s) else 1


def run(args: argparse.Namespace, argv_services: Sequence[Service] | None = None) -> int:
    check(args)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    fleet = Fleet()
    if not args.skip_upgrade:
        code = upgrade(fleet)
        if code != 0:
            fleet.say(f"db upgrade failed (code {code}); nothing started")
            return 1
    for service in argv_services or services(args):
        if stop.is_set():
            break
        child = fleet.start(service)
        fleet.say(f"started {service.name} (pid {child.proc.pid})")
    return supervise(fleet, stop, args.stop_timeout_s)


if __name__ == "__main__":
    from kit.cli import main

    raise SystemExit(main(["run-all", *sys.argv[1:]]))
