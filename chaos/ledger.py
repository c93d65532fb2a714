"""The effect ledger: a target outside the kit, written by the tasks themselves, that
says what was executed and what took effect, keyed by each run's idempotency key.

Every task is `/bin/sh -c TASK_SCRIPT chaos-task MODE PRE_S WINDOW_S LEDGER_DIR`:
- it appends `start` to exec.log first thing (with $PPID: the worker running it);
- MODE `key` honours the idempotency key the way a typical target does: look the key
  up, and only if it is new, make the effect. The effect is one line appended to
  effects.log, and that line is also the key's record (a marker file after it is only a
  fast path): a target that made its effect and remembered the key in two steps made
  the effect twice when a kill fell between them (a poison `killworker` sibling did, in
  CI). Check and act are still two steps: two executions of one run that overlap in
  time both act, and the ledger shows the key twice (a duplicate effect). One after the
  other, the second finds the key and records `dedup`.
- MODE `naive` ignores the key: every execution that gets that far is an effect;
- MODE `fail`, `hang`, `crash`, `killworker` are poison: exit 3; sleep past the job's
  timeout; die by SIGSEGV; SIGKILL the worker that runs it. None reaches an effect.
  `killworker` needs a task allowed to signal its worker, so a worker of its own user:
  a task run as another user (a root worker's run_as) cannot, and exits 3 instead.
- PRE_S sleeps before the effect (work in progress when a fault lands); WINDOW_S sleeps
  after it, having appended `window` to window.log: the effect is made and the worker
  has not heard back yet (where drill 1 kills the worker).

Lines are `event key attempt epoch_ms ppid`, each one O_APPEND write, so concurrent
tasks never interleave within a line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MODES = ("key", "naive", "fail", "hang", "crash", "killworker")
POISON_MODES = ("fail", "hang", "crash", "killworker")

TASK_SCRIPT = r"""L=$4; K=$CRONFLEET_IDEMPOTENCY_KEY; A=$CRONFLEET_ATTEMPT
echo "start $K $A $(date +%s%3N) $PPID" >> "$L/exec.log"
case "$1" in
  fail) exit 3 ;;
  hang) sleep 3600; exit 0 ;;
  crash) kill -SEGV $$; exit 0 ;;
  killworker) kill -KILL $PPID || exit 3; sleep 2; exit 0 ;;
esac
[ "$2" = 0 ] || sleep "$2"
if [ "$1" = key ] && { [ -e "$L/done/$K" ] || grep -q "^effect $K " "$L/effects.log"; }; then
  echo "dedup $K $A $(date +%s%3N) $PPID" >> "$L/exec.log"; exit 0
fi
echo "effect $K $A $(date +%s%3N) $PPID" >> "$L/effects.log"
: > "$L/done/$K"
if [ "$3" != 0 ]; then
  echo "window $K $A $(date +%s%3N) $PPID" >> "$L/window.log"; sleep "$3"
fi
exit 0
"""


def task_spec(ledger: Path, mode: str, pre_s: float = 0.0, window_s: float = 0.0) -> dict:
    if mode not in MODES:
        raise ValueError(f"mode: one of {', '.join(MODES)}")
    if not ledger.is_absolute():  # a task runs in its own directory: relative would miss
        raise ValueError(f"ledger: {ledger} must be an absolute path")
    return {
        "type": "command",
        "argv": ["/bin/sh", "-c", TASK_SCRIPT, "chaos-task", mode, _num(pre_s), _num(window_s),
                 str(ledger)],
    }  # fmt: skip


def _num(seconds: float) -> str:
    return "0" if seconds <= 0 else f"{seconds:g}"


def leftover_tasks(ledger: Path) -> list[int]:
    """Live processes of tasks writing to `ledger` (by their argv), from /proc."""
    mark = ["chaos-task", str(ledger)]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if all(m in argv for m in mark) and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def kill_leftover_tasks(ledger: Path) -> list[int]:
    """SIGKILL the process group of every task of `ledger` still alive (a worker that
    died without stopping it, say); returns their pids. Never the caller's own group."""
    pids = leftover_tasks(ledger)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            pgid = os.getpgid(pid)
            if pgid == os.getpgrp():
                os.kill(pid, signal.SIGKILL)
            else:
                os.killpg(pgid, signal.SIGKILL)
    return pids


class LedgerUnreachable(Exception):
    """The tasks' run-as user cannot write the ledger: every task would fail to record its
    effect, and the drill would report every run lost."""


def prepare(ledger: Path, run_as: str | None = None) -> None:
    """The ledger's files, writable by the tasks' run-as user (`nobody` under a root
    worker): the logs they append to and the directory of markers they create. With a
    run-as user, a task's write is tried as that user first (a directory above the
    ledger closed to it, such as a private temporary directory, fails here, not as
    hundreds of lost runs)."""
    (ledger / "done").mkdir(parents=True, exist_ok=True)
    (ledger / "done").chmod(0o777)
    for name in ("exec.log", "effects.log", "window.log"):
        (ledger / name).touch()
        (ledger / name).chmod(0o666)
    if run_as is None:
        return
    probe = subprocess.run(
        ["/bin/sh", "-c", 'touch "$1/done/.probe" && : >> "$1/effects.log"', "probe", ledger],
        user=run_as,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    (ledger / "done" / ".probe").unlink(missing_ok=True)
    if probe.returncode != 0:
        raise LedgerUnreachable(
            f"the tasks run as {run_as!r} cannot write the ledger {ledger} "
            f"({probe.stderr.strip() or 'refused'}): choose an --out whose every directory "
            "that user may enter"
        )


@dataclass(frozen=True, slots=True)
class LedgerLine:
    event: str  # start | dedup | effect | window
    key: str
    attempt: int
    at_ms: int
    ppid: int


def read_lines(path: Path) -> list[LedgerLine]:
    out: list[LedgerLine] = []
    try:
        f = path.open(errors="replace")
    except FileNotFoundError:
        return out
    with f:  # line by line, keys shared with the run records (a soak's ledger: millions)
        for line in f:
            parts = line.split()
            if len(parts) != 5:
                continue  # a line cut short by a kill mid-write: nothing to learn from it
            try:
                event, key = sys.intern(parts[0]), sys.intern(parts[1])
                out.append(LedgerLine(event, key, int(parts[2]), int(parts[3]), int(parts[4])))
            except ValueError:
                continue
    return out


def executions(ledger: Path) -> list[LedgerLine]:
    return read_lines(ledger / "exec.log")


def effects(ledger: Path) -> list[LedgerLine]:
    return read_lines(ledger / "effects.log")


def windows(ledger: Path) -> list[LedgerLine]:
    return read_lines(ledger / "window.log")


class Tail:
    """New lines of one ledger file since the last look (drills watch window.log and
    exec.log to time their faults)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def new(self) -> Iterator[LedgerLine]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self.offset += end
        for raw in data[:end].decode(errors="replace").splitlines():
            parts = raw.split()
            if len(parts) == 5 and parts[2].isdigit() and parts[3].isdigit():
                yield LedgerLine(parts[0], parts[1], int(parts[2]), int(parts[3]), int(parts[4]))
