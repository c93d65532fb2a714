"""The command task: an argv (never a shell) in its own process group.

The run owns the group: on timeout or cancel the whole group gets SIGTERM, then
SIGKILL after a short grace, so a child's children die with it; and when the command
exits, members it left behind in the group are stopped the same way, so nothing of a
run outlives it. The environment is a minimal base (PATH, locale, time zone, HOME),
not the worker's own, which holds the database URL; the job's `env` is added, then
CRONFLEET_RUN_ID / CRONFLEET_IDEMPOTENCY_KEY / CRONFLEET_ATTEMPT, which it cannot
override. Output is drained by threads that keep only a bounded tail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from kit.tasks.context import Deadline, RunContext, TaskResult, stopped

KILL_GRACE_S = 2.0
EXCERPT_BYTES = 2048
_BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "TMPDIR")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def command_env(spec_env: Mapping[str, str], ctx: RunContext) -> dict[str, str]:
    env = {k: os.environ[k] for k in _BASE_ENV if k in os.environ}
    env.setdefault("PATH", _DEFAULT_PATH)
    env.update({str(k): str(v) for k, v in spec_env.items()})
    env["CRONFLEET_RUN_ID"] = ctx.run_id
    env["CRONFLEET_IDEMPOTENCY_KEY"] = ctx.run_id
    env["CRONFLEET_ATTEMPT"] = str(ctx.attempt)
    return env


def run_command(
    spec: Mapping[str, Any], ctx: RunContext, *, kill_grace_s: float = KILL_GRACE_S
) -> TaskResult:
    deadline = Deadline(ctx.timeout_s)
    argv = spec.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return TaskResult(False, "task.argv: must be a non-empty list of strings")
    try:
        proc = subprocess.Popen(
            argv,
            env=command_env(dict(spec.get("env") or {}), ctx),
            cwd=spec.get("cwd"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own session and process group: pgid == pid
        )
    except (OSError, ValueError) as exc:
        return TaskResult(False, f"cannot start {argv[0]!r}: {exc}")
    stdout, stderr = _Tail(proc.stdout), _Tail(proc.stderr)
    failure: TaskResult | None = None
    while proc.poll() is None:
        if failure := stopped(ctx, deadline):
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)
    _stop_group(proc, kill_grace_s)  # the command, or whatever it left behind
    code = proc.wait()
    out, err = stdout.text(), stderr.text()
    detail = f"exit code {code}" + (f"; stdout: {out}" if out else "")
    if failure is not None:
        error = f"{failure.error}; process group killed"
        return TaskResult(False, error + (f"; stderr: {err}" if err else ""), detail)
    if code == 0:
        return TaskResult(True, None, detail)
    what = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return TaskResult(False, what + (f"; stderr: {err}" if err else ""), detail)


def _stop_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the group, SIGKILL it if anything is left after the grace."""
    pgid = proc.pid
    if not _signal_group(pgid, signal.SIGTERM):
        return
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        proc.poll()  # reap the leader, so a dead one does not count as a member
        if not group_alive(pgid):
            return
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Does a process of the group still run? Zombies do not count: orphans are reaped
    by PID 1, which in a container may be slow to do it."""
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return _signal_group(pgid, 0)
    for entry in proc_dir.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces, so split after ")".
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed identity; nothing we may do
        return False
    return True


class _Tail:
    """Drains a pipe on a thread, keeping the last EXCERPT_BYTES bytes."""

    def __init__(self, pipe: IO[bytes] | None) -> None:
        self._data = bytearray()
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe: IO[bytes] | None) -> None:
        if pipe is None:
            return
        with pipe:
            while chunk := pipe.read1(65536):  # type: ignore[attr-defined]
                self._data += chunk
                if len(self._data) > 2 * EXCERPT_BYTES:
                    del self._data[:-EXCERPT_BYTES]

    def text(self) -> str:
        self._thread.join(1.0)  # a setsid'd grandchild may hold the pipe; don't wait on it
        return bytes(self._data[-EXCERPT_BYTES:]).decode("utf-8", errors="replace").strip()
