"""Pid files, ports and bounded waits shared by the stack's services.

The stack only ever signals a process it can prove it started: a pid from its own
pid file whose command line still names the stack's own files. A stale pid file
(process gone, or the pid reused by something else) is treated as "not running".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kit.settings import cronfleet_home


class StackError(Exception):
    """Something the stack cannot install or start: printed as one line, exit 1."""


def progress(message: str) -> None:
    """A short progress line on stderr, so stdout carries only the connection settings."""
    print(f"  {message}", file=sys.stderr, flush=True)


# --- remembered ports -------------------------------------------------------------------


def state_file() -> Path:
    return cronfleet_home() / "stack.json"


def load_state() -> dict[str, int]:
    """Ports chosen by earlier `up`s, so a service keeps its address across restarts."""
    try:
        data = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return {}
    return {k: int(v) for k, v in data.items() if isinstance(v, int)}


def save_state(**ports: int) -> None:
    state = load_state() | ports
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")


# --- ports ------------------------------------------------------------------------------


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(preferred: int, name: str, avoid: tuple[int, ...] = ()) -> int:
    """The preferred port when free, else the next free one above it (said out loud)."""
    for port in range(preferred, min(preferred + 200, 65536)):
        if port not in avoid and port_free(port):
            if port != preferred:
                progress(f"{name}: port {preferred} is taken by another process; using {port}")
            return port
    raise StackError(f"{name}: port {preferred} is taken and no free port found above it")


BIND_ATTEMPTS = 3


def lost_bind_race(log: Path, since: int) -> bool:
    """Whether what `log` got after byte `since` says a port we chose was taken.

    Our ports lie inside Linux's ephemeral range (32768-60999), so between choosing a
    free port and binding it any outgoing connection can be handed it as its local
    port -- the broker's own connection to its controller, made just before the
    broker's listener binds, is one. Choosing again and restarting is the remedy.
    """
    try:
        with log.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return False
    return "Address already in use" in text


def start_again_on_bind_race(name: str, log: Path, start: Callable[[], None]) -> None:
    """`start()` (it chooses its ports), again while what it logged says a port it chose
    was taken before the bind (`lost_bind_race`), at most BIND_ATTEMPTS times."""
    for attempt in range(1, BIND_ATTEMPTS + 1):
        since = log_size(log)
        try:
            start()
            return
        except StackError:
            if attempt == BIND_ATTEMPTS or not lost_bind_race(log, since):
                raise
            progress(
                f"{name}: a port chosen free was taken before the server bound it (an "
                f"outgoing connection's ephemeral port); starting again ({attempt + 1} of "
                f"{BIND_ATTEMPTS})"
            )


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def port_answers(port: int, host: str = "127.0.0.1", timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


# --- processes --------------------------------------------------------------------------


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cmdline(pid: int) -> str:
    """The process's command line ('' when it is gone or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def running(pid: int) -> bool:
    """True when `pid` exists and is not a zombie: an exited child not yet reaped (by init,
    slow to do it in a container) is gone for every caller here."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    try:  # one that exits between open and read raises ESRCH (an OSError)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # comm may hold spaces
    except (OSError, IndexError):
        return False


def alive(pid: int, marker: str) -> bool:
    """True when `pid` runs and its command line contains `marker` (guards pid reuse)."""
    return marker in cmdline(pid)


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def terminate(pid: int, marker: str, grace_s: float = 30.0) -> None:
    """SIGTERM to the process group, then SIGKILL after `grace_s`; both bounded."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        if not alive(pid, marker):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if wait_until(lambda: not alive(pid, marker), wait_s, 0.2):
            return
    raise StackError(f"process {pid} did not stop after SIGKILL")


def log_tail(path: Path, lines: int = 25, max_bytes: int = 256 * 1024) -> str:
    """The last `lines` lines, read from the file's last `max_bytes` (a log may be large)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - max_bytes))
            text = f.read().decode(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:])
