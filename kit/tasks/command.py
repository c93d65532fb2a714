"""The command task: an argv (never a shell) in its own process group.

Only what the operator allowed runs (kit.core.task_policy, asked again at every run):
`argv[0]` exactly one of the tenant's executables, a working directory only among its
`cwd` directories, environment names only from its `env` list and never one the kit
always refuses (kit.core.env_names); with no permit nothing runs. Where the permit
names a `run_as` user, the child becomes that user (its group, no supplementary
groups) before it execs, so file permissions keep it out of the worker's files
(`$CRONFLEET_HOME`, `stack.env`, `/proc/<worker>/environ`); a worker running as root
runs no command of a tenant without one.

What the command sees of the worker: nothing but a minimal environment (PATH, locale,
time zone), never the worker's own, which holds the database URL. HOME and TMPDIR are
a fresh directory of the run (owned by the run-as user, mode 0700), removed afterwards,
not the worker's HOME where `~/.cronfleet` lives; so is the working directory unless
the job names one. A job's own directory is entered only after the user switch (the
child starts in the run's directory and execs coreutils' `env --chdir=DIR --`, which
already runs as the run-as user), so the run-as user's permissions decide whether it
may go there: Popen's own `cwd` is entered while still root. The job's `env` is added,
then CRONFLEET_RUN_ID / CRONFLEET_IDEMPOTENCY_KEY / CRONFLEET_ATTEMPT, which it cannot
override.

The run owns the group: on timeout or cancel the whole group gets SIGTERM, then SIGKILL
after a short grace, so a child's children die with it (a run preempted for a paid
tenant's is stopped the same way, then runs again at the same attempt with the same
CRONFLEET_RUN_ID / CRONFLEET_IDEMPOTENCY_KEY / CRONFLEET_ATTEMPT: docs/tenants.md); and
when the command exits, members it left behind in the group are stopped the same way, so
nothing of a run outlives it. That holds when the worker dies too, even by SIGKILL with
no cleanup run: the worker's keeper process (see `_Keeper`) stops the group once the
worker is gone, and at the run's stop deadline when the worker, alive but not running
(stopped, paused by its host), could not confirm its lease: its task does not run on
into a lease another worker holds by then. Output is drained by threads that keep only a
bounded tail, scrubbed of the job's secret values before it is reported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any, Literal

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from kit.core import defaults
from kit.core.errors import FieldError
from kit.core.output import OUTPUT_CAP_BYTES, Output, excerpt
from kit.core.redaction import MASK, scrub, scrub_excerpt
from kit.core.task_policy import NOT_NORMAL_PATH, env_name_refusal, normal_path
from kit.tasks.context import Deadline, RunContext, TaskResult, stopped
from kit.tasks.spec import TaskSpec, TaskType, names_present, no_mask

log = logging.getLogger(__name__)
KILL_GRACE_S = defaults.KILL_GRACE_MS / 1000
EXCERPT_BYTES = 2048  # of stderr, in a failed run's error
# What a stream's tail keeps: the output excerpt and room for a secret cut at its edge.
_TAIL_BYTES = max(EXCERPT_BYTES, OUTPUT_CAP_BYTES) + 1024
_BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# coreutils' env (8.28+ for --chdir), found where the system keeps it, never on PATH
_ENV_PROGRAM_DIRS = "/usr/bin:/bin"


# The rules of `env` names and of `cwd` as the API's document declares them: the same
# as `env_name_refusal`'s form check and `normal_path` (tests/unit/test_tasks_command_schema.py
# holds each pattern equal to its check).
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
NORMAL_PATH_PATTERN = r"^/$|^(?:/(?!\.\.?(?:/|$))[^/\u0000]+)+$"


class CommandTask(TaskSpec):
    type: Literal["command"]
    argv: list[str] = Field(
        min_length=1,
        description="argv[0] must be an executable the operator allowed for the tenant, "
        "by the same absolute path; the token needs the `command` scope",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Only names the operator's task policy lets the tenant set; names "
        "that make a shell, an interpreter or the loader run code are always refused",
        json_schema_extra={"propertyNames": {"pattern": ENV_NAME_PATTERN}},
    )
    secret_env: list[str] = Field(
        default_factory=list,
        description=f"Names in `env` whose values are secret (shown as {MASK!r}, scrubbed)",
    )
    cwd: (
        Annotated[str, WithJsonSchema({"type": "string", "pattern": NORMAL_PATH_PATTERN})] | None
    ) = Field(
        default=None,
        description="An absolute directory the operator's task policy allows for the "
        "tenant, entered as the run-as user; unset: the run's own fresh directory",
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if reason := env_name_refusal(name):
                raise FieldError(f"env.{name}", reason)
        return value

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, value: str | None) -> str | None:
        if value is not None and not normal_path(value):
            raise FieldError("cwd", NOT_NORMAL_PATH)
        return value

    @model_validator(mode="after")
    def _secrets(self) -> CommandTask:
        names_present(self.secret_env, self.env, "env", fold=False)
        no_mask(self.env, "env")
        return self


@dataclass(frozen=True)
class _Identity:
    """Who the child runs as: None fields keep the worker's own."""

    uid: int | None = None
    gid: int | None = None


def command_env(spec_env: Mapping[str, str], ctx: RunContext, home: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in _BASE_ENV if k in os.environ}
    env.setdefault("PATH", _DEFAULT_PATH)
    env["HOME"] = env["TMPDIR"] = home
    # refusal() has refused a run with any of these names; dropping them again costs nothing
    env.update({str(k): str(v) for k, v in spec_env.items() if not env_name_refusal(str(k))})
    env["CRONFLEET_RUN_ID"] = ctx.run_id
    env["CRONFLEET_IDEMPOTENCY_KEY"] = ctx.run_id
    env["CRONFLEET_ATTEMPT"] = str(ctx.attempt)
    return env


def _identity(run_as: str | None) -> _Identity:
    """The run-as user's uid and primary gid; ValueError if it cannot be used."""
    if run_as is None:
        return _Identity()
    try:
        user = pwd.getpwnam(run_as)
    except KeyError:
        raise ValueError(f"run_as user {run_as!r} does not exist on this worker") from None
    if user.pw_uid == 0:
        raise ValueError(f"run_as user {run_as!r} is root; a tenant's command never runs as root")
    if user.pw_uid == os.geteuid():
        return _Identity()  # already that user: no identity change (and no setgroups)
    return _Identity(user.pw_uid, user.pw_gid)


def _run_dir(identity: _Identity) -> Path:
    """A fresh HOME, TMPDIR and working directory for one run, the run-as user's alone."""
    path = Path(tempfile.mkdtemp(prefix="cronfleet-run-"))
    if identity.uid is not None:
        os.chown(path, identity.uid, identity.gid if identity.gid is not None else -1)
    path.chmod(0o700)
    return path


def refusal(spec: Mapping[str, Any], ctx: RunContext) -> str | None:
    """Why this command may not run here, or None: the operator's permit, as it is now,
    decides (the same decision the API made when the job was written)."""
    argv = spec.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "task.argv: must be a non-empty list of strings"
    if ctx.commands is None:
        return (
            "refused by the operator's task policy: command tasks are not allowed for "
            f"tenant {ctx.tenant!r}"
        )
    if reason := ctx.commands.identity_refusal(os.geteuid() == 0, ctx.tenant):
        return f"refused by the operator's task policy: {reason}"
    if found := ctx.commands.task_refusal(spec, ctx.tenant):
        return f"refused by the operator's task policy: task.{found[0]}: {found[1]}"
    return None


def run_command(
    spec: Mapping[str, Any], ctx: RunContext, *, kill_grace_s: float = KILL_GRACE_S
) -> TaskResult:
    deadline = Deadline(ctx.timeout_s)
    if reason := refusal(spec, ctx):
        return TaskResult(False, reason)
    argv: list[str] = spec["argv"]
    try:
        identity = _identity(ctx.commands.run_as if ctx.commands else None)
    except ValueError as exc:
        return TaskResult(False, f"refused by the operator's task policy: {exc}")
    if (entering := _entering(spec.get("cwd"), argv)) is None:
        return TaskResult(False, "task.cwd: cannot be entered: coreutils' env is not installed")
    argv = entering
    run_dir = _run_dir(identity)
    try:
        return _run(argv, spec, ctx, deadline, identity, run_dir, kill_grace_s)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _entering(cwd: str | None, argv: list[str]) -> list[str] | None:
    """argv, started through `env --chdir` when the job names its working directory (None
    if there is no env): the child begins in the run's directory (entered as root, which
    made it) and env, already the run-as user, enters the job's; if that user may not,
    env's error says so, and says no more than that user could learn itself."""
    if cwd is None:
        return argv
    program = shutil.which("env", path=_ENV_PROGRAM_DIRS)
    return None if program is None else [program, f"--chdir={cwd}", "--", *argv]


def _run(
    argv: list[str],
    spec: Mapping[str, Any],
    ctx: RunContext,
    deadline: Deadline,
    identity: _Identity,
    run_dir: Path,
    kill_grace_s: float,
) -> TaskResult:
    _keeper.start()  # before the spawn: registering it is then one write, not a start
    change_identity: dict[str, Any] = {}
    if identity.uid is not None:
        change_identity = {"user": identity.uid, "group": identity.gid, "extra_groups": []}
    try:
        proc = subprocess.Popen(
            argv,
            env=command_env(dict(spec.get("env") or {}), ctx, str(run_dir)),
            cwd=run_dir,  # entered as root: the job's own is entered later (_entering)
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own session and process group: pgid == pid
            **change_identity,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return TaskResult(False, scrub(f"cannot start {argv[0]!r}: {exc}", ctx.secrets))
    # the run's stop deadline (kit.tasks.context.Cancel.hold_until), kept from outside
    until, watch = getattr(ctx.cancel, "until", None), getattr(ctx.cancel, "on_until", None)
    _keeper.register(proc.pid, kill_grace_s, until() if until else None)
    forget = watch(lambda at: _keeper.extend(proc.pid, at)) if watch else None
    stdout, stderr = _Tail(proc.stdout), _Tail(proc.stderr)
    failure: TaskResult | None = None
    while proc.poll() is None:
        if failure := stopped(ctx, deadline):
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)
    _stop_group(proc, kill_grace_s)  # the command, or whatever it left behind
    code = proc.wait()
    if forget is not None:
        forget()
    _keeper.unregister(proc.pid)
    out, err = stdout.text(ctx.secrets), stderr.text(ctx.secrets)
    output = Output(stdout.excerpt(ctx.secrets), stderr.excerpt(ctx.secrets))
    detail = f"exit code {code}" + (f"; stdout: {out}" if out else "")
    if failure is not None:
        error = f"{failure.error}; process group killed"
        return TaskResult(False, error + (f"; stderr: {err}" if err else ""), detail, output)
    if code == 0:
        return TaskResult(True, None, detail, output)
    what = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return TaskResult(False, what + (f"; stderr: {err}" if err else ""), detail, output)


# The keeper: stdin is a pipe only the worker writes to, a line per change: "+PGID GRACE
# [UNTIL]" when a task group starts, "=PGID UNTIL" when the run's lease is confirmed
# further, "-PGID" when the run stopped it itself. UNTIL is a time.monotonic() instant (one
# clock for every process of the host): a group still registered then gets SIGTERM, and
# SIGKILL after its grace, whatever the worker is doing (stopped, starved). EOF means the
# worker is gone: SIGTERM every group still registered, SIGKILL each one left after its
# grace.
_KEEPER = """import os, select, signal, sys, time
groups, until, dying = {}, {}, {}
fd, buf, gone = sys.stdin.fileno(), b"", False
def alive(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except OSError:
        return False
    return True
def stop(pgid, now):
    grace = groups.pop(pgid, 2.0)
    until.pop(pgid, None)
    if alive(pgid, signal.SIGTERM):
        dying[pgid] = now + grace
while not gone or dying:
    now = time.monotonic()
    for p in [p for p, t in until.items() if now >= t]:
        stop(p, now)
    for p, end in list(dying.items()):
        if not alive(p, 0):
            del dying[p]
        elif now >= end:
            alive(p, signal.SIGKILL)
            del dying[p]
    waits = [t - now for t in until.values()] + ([0.05] if dying else [])
    if gone:
        time.sleep(0.05)
        continue
    ready, _, _ = select.select([fd], [], [], max(0.0, min(waits)) if waits else None)
    if not ready:
        continue
    data = os.read(fd, 65536)
    if not data:
        gone = True
        for p in list(groups):
            stop(p, time.monotonic())
        continue
    *lines, buf = (buf + data).split(b"\\n")
    for line in lines:
        f = line[1:].split()
        try:
            if line[:1] == b"+" and len(f) in (2, 3):
                groups[int(f[0])] = float(f[1])
                if len(f) == 3:
                    until[int(f[0])] = float(f[2])
            elif line[:1] == b"=" and len(f) == 2 and int(f[0]) in groups:
                until[int(f[0])] = float(f[1])
            elif line[:1] == b"-" and len(f) == 1:
                groups.pop(int(f[0]), None)
                until.pop(int(f[0]), None)
        except ValueError:
            continue
"""


class _Keeper:
    """Stops the worker's task groups when the worker dies by any means, SIGKILL included.

    One small process per worker process, started before the first command task's
    spawn: of the worker's own user, in its own session (so a signal to the worker's group
    spares it), it reads a pipe whose only writer is the worker. The worker registers each
    task group right after spawning it and unregisters it once the run stopped it; the
    kernel closes the pipe when the worker dies, and the keeper then stops every group
    still registered. It also stops a group whose run's stop deadline passed without the
    worker moving it (kit.tasks.context.Cancel.hold_until; the worker moves it at every
    lease renewal and its own fence acts first), since a stopped worker's fence does not
    run (tests/unit/test_command_keeper.py).
    The write end is non-inheritable and Popen closes other fds in the child (close_fds),
    so no task holds the pipe open after the worker is gone. Writes are one lock's (tasks
    run on many threads). If the keeper died (a write fails, or it exited), the next
    write starts a new one and registers the live groups again; if that fails too, it
    is logged and the tasks run on, kept by the worker alone.

    Not PR_SET_PDEATHSIG: it reaches only the direct child (not `sleep` under `sh -c`),
    fires when the forking *thread* ends rather than the worker, and needs a preexec_fn,
    unsafe in a threaded worker. Being the worker's user (root where run_as applies),
    the keeper may signal a group that changed identity. A worker killed between a
    task's spawn and its registration leaves that task unkept: a window of one line and
    one uncontended write; the keeper is started before the spawn (`start`), never
    under the registration lock, so no registration waits behind a Python start.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._groups: dict[int, tuple[float, float | None]] = {}  # pgid -> (grace, until)
        os.register_at_fork(after_in_child=self._forget)

    def start(self) -> None:
        """Start the keeper if none runs (a worker's first command task, or the last
        keeper died): it then waits, keeping nothing, until a group is registered."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                self._restart()

    def register(self, pgid: int, grace_s: float, until: float | None = None) -> None:
        """Keep the group: stop it when the worker dies, or at `until` (monotonic)."""
        with self._lock:
            self._groups[pgid] = (grace_s, until)
            self._send(_register_line(pgid, grace_s, until))

    def extend(self, pgid: int, until: float) -> None:
        """The run's lease was confirmed further: stop its group at `until` instead."""
        with self._lock:
            kept = self._groups.get(pgid)
            if kept is not None:
                self._groups[pgid] = (kept[0], until)
                self._send(f"={pgid} {until:.3f}\n".encode())

    def unregister(self, pgid: int) -> None:
        with self._lock:
            if self._groups.pop(pgid, None) is not None:
                self._send(f"-{pgid}\n".encode())

    def _send(self, line: bytes) -> None:
        """Write a line under the lock; a dead keeper is replaced, told every live group."""
        proc = self._proc
        if proc is not None and proc.poll() is None and proc.stdin is not None:
            try:
                os.write(proc.stdin.fileno(), line)  # under PIPE_BUF: one atomic write
                return
            except OSError as exc:
                log.warning("the keeper of command task groups is gone (%s): restarting", exc)
        self._restart()

    def _restart(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()
            with contextlib.suppress(OSError):
                self._proc.communicate()  # closes its stdin, reaps it
            self._proc = None
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _KEEPER],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            assert self._proc.stdin is not None
            lines = b"".join(_register_line(p, g, u) for p, (g, u) in self._groups.items())
            self._proc.stdin.write(lines)
            self._proc.stdin.flush()
        except OSError as exc:  # the tasks run on, kept by the worker alone
            log.warning("cannot start the keeper of command task groups: %s", exc)

    def _forget(self) -> None:
        """In a forked child: the pipe and the groups are the parent's, not its own."""
        self._lock = threading.Lock()
        if self._proc is not None and self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()  # else this child would keep the keeper waiting
        self._proc = None
        self._groups = {}


def _register_line(pgid: int, grace_s: float, until: float | None) -> bytes:
    return f"+{pgid} {grace_s}{'' if until is None else f' {until:.3f}'}\n".encode()


_keeper = _Keeper()


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
    """Drains a pipe on a thread, keeping the last bytes (between one and two tails)."""

    def __init__(self, pipe: IO[bytes] | None) -> None:
        self._data = bytearray()
        self._seen = 0
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe: IO[bytes] | None) -> None:
        if pipe is None:
            return
        with pipe:
            while chunk := pipe.read1(65536):  # type: ignore[attr-defined]
                self._data += chunk
                self._seen += len(chunk)
                if len(self._data) > 2 * _TAIL_BYTES:
                    del self._data[:-_TAIL_BYTES]

    def text(self, secrets: tuple[str, ...] = ()) -> str:
        """The last EXCERPT_BYTES of the output, scrubbed: whole secrets are replaced in
        the wider window first, then the excerpt is cut from it."""
        self._thread.join(1.0)  # a setsid'd grandchild may hold the pipe; don't wait on it
        raw = bytes(self._data)
        window = scrub(raw.decode("utf-8", errors="replace"), secrets)
        excerpt = window[-EXCERPT_BYTES:]
        cut = self._seen > len(raw) or len(excerpt) < len(window)
        return scrub_excerpt(excerpt, secrets, cut_head=cut, cut_tail=False).strip()

    def excerpt(self, secrets: tuple[str, ...] = ()) -> str:
        """The output kept for the run page: its end, at most OUTPUT_CAP_BYTES, scrubbed
        (kit.core.output)."""
        self._thread.join(1.0)
        raw = bytes(self._data)
        text = raw.decode("utf-8", errors="replace")
        return excerpt(text, secrets, OUTPUT_CAP_BYTES, keep="tail", cut=self._seen > len(raw))


TASK = TaskType("command", CommandTask, run_command)
