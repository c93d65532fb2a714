"""The command task: argv without a shell, run id in the environment, the whole
process group killed on timeout and cancel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kit.core.task_policy import CommandPermit
from kit.tasks import RunContext, command, execute
from kit.tasks.command import group_alive, run_command

PY = sys.executable
# What these tests run (the operator's allow-list matches argv[0] exactly).
# A root worker runs commands only as a run-as user; any other user runs them as itself.
RUN_AS = "nobody" if os.geteuid() == 0 else None
PERMIT = CommandPermit(frozenset({PY, "sh", "echo"}), run_as=RUN_AS, env=("MY_VAR",))


def ctx(timeout_s: float = 30.0, **kw: object) -> RunContext:
    kw.setdefault("commands", PERMIT)
    return RunContext("run-abc", 3, timeout_s, **kw)  # type: ignore[arg-type]


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan may wait a while for PID 1 to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + 10
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return path.read_text().strip()


def test_environment_carries_the_run_id_and_not_the_workers_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONFLEET_DATABASE_URL", "postgresql://secret@db/x")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    spec = {
        "type": "command",
        "argv": [PY, "-c", code],
        "env": {"MY_VAR": "1"},
    }
    result = execute(spec, ctx())
    assert result.ok, result
    env = json.loads((result.detail or "").split("stdout: ", 1)[1])
    assert env["CRONFLEET_RUN_ID"] == "run-abc"
    assert env["CRONFLEET_IDEMPOTENCY_KEY"] == "run-abc"
    assert env["CRONFLEET_ATTEMPT"] == "3"
    assert env["MY_VAR"] == "1"
    assert "CRONFLEET_DATABASE_URL" not in env
    forged = execute({**spec, "env": {"CRONFLEET_RUN_ID": "forged"}}, ctx())
    assert not forged.ok and "task.env.CRONFLEET_RUN_ID: is never a name" in (forged.error or "")


def test_no_shell_is_involved() -> None:
    result = execute({"type": "command", "argv": ["echo", "$HOME;", "rm", "*"]}, ctx())
    assert result.ok
    assert result.detail == "exit code 0; stdout: $HOME; rm *"


def test_non_zero_exit_fails_with_a_bounded_stderr_excerpt() -> None:
    code = "import sys; sys.stderr.write('x' * 100000 + 'LAST'); sys.exit(3)"
    result = execute({"type": "command", "argv": [PY, "-c", code]}, ctx())
    assert not result.ok
    assert (result.error or "").startswith("exit code 3; stderr: ")
    assert result.error.endswith("LAST")  # type: ignore[union-attr]
    assert len(result.error) < 2048 + 100  # type: ignore[arg-type]


def test_missing_program_and_bad_argv_fail_cleanly(tmp_path: Path) -> None:
    nope = str(tmp_path / "nope")
    permit = CommandPermit(frozenset({nope}), RUN_AS)
    missing = execute({"type": "command", "argv": [nope]}, ctx(commands=permit))
    assert not missing.ok and "cannot start" in (missing.error or "")
    assert not execute({"type": "command", "argv": []}, ctx()).ok
    assert not execute({"type": "command", "argv": "ls -l"}, ctx()).ok


def _family_script(pidfile: Path) -> str:
    """A child that starts a grandchild, records its pid, and waits forever."""
    return (
        "import subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(g.pid))\n"
        "time.sleep(120)\n"
    )


def test_timeout_kills_the_whole_process_group(shared_dir: Path) -> None:
    pidfile = shared_dir / "grandchild.pid"
    spec = {"type": "command", "argv": [PY, "-c", _family_script(pidfile)]}
    result = execute(spec, ctx(timeout_s=2.0))
    assert not result.ok
    assert (result.error or "").startswith("timed out after 2 s; process group killed")
    grandchild = int(wait_for_file(pidfile))
    assert not running(grandchild)


def test_cancel_kills_the_whole_process_group(shared_dir: Path) -> None:
    pidfile = shared_dir / "grandchild.pid"
    cancel = threading.Event()
    spec = {"type": "command", "argv": [PY, "-c", _family_script(pidfile)]}
    setter = threading.Thread(target=lambda: (wait_for_file(pidfile), cancel.set()))
    setter.start()
    result = execute(spec, ctx(cancel=cancel))
    setter.join()
    assert not result.ok and (result.error or "").startswith("cancelled; process group killed")
    assert not running(int(pidfile.read_text()))


def test_a_process_ignoring_sigterm_is_killed() -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    result = run_command({"argv": [PY, "-c", code]}, ctx(timeout_s=0.5), kill_grace_s=0.2)
    assert not result.ok
    assert result.detail == "exit code -9"


def test_members_left_behind_after_exit_are_stopped(shared_dir: Path) -> None:
    pidfile = shared_dir / "bg.pid"
    script = f"sleep 120 & echo $! > {pidfile}; exit 0"
    result = execute({"type": "command", "argv": ["sh", "-c", script]}, ctx())
    assert result.ok
    assert not running(int(pidfile.read_text()))


def test_group_alive_sees_own_group() -> None:
    assert group_alive(os.getpgid(0))
    assert not group_alive(2**22 + 12345)  # no such group


def test_the_keeper_pipe_does_not_leak_into_a_task() -> None:
    """A task holding the keeper's pipe would keep it open after the worker died."""
    assert run_command({"argv": [PY, "-c", "pass"]}, ctx()).ok  # the keeper is up
    keeper = command._keeper._proc
    assert keeper is not None and keeper.stdin is not None
    pipe = f"pipe:[{os.fstat(keeper.stdin.fileno()).st_ino}]"
    code = "import os\nfor f in range(256):\n try: print(os.readlink(f'/proc/self/fd/{f}'))\n"
    code += " except OSError: pass"
    result = run_command({"argv": [PY, "-c", code]}, ctx())
    assert result.ok and result.detail is not None and "pipe:[" in result.detail
    assert pipe not in result.detail


def test_a_dead_keeper_is_replaced_and_told_every_live_group() -> None:
    """The new keeper stops the groups registered before the old one died, too."""
    sleepers = [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(2)]
    keeper = command._Keeper()
    try:
        keeper.register(sleepers[0].pid, 0.5)
        first = keeper._proc
        assert first is not None
        first.kill()
        first.wait()
        keeper.register(sleepers[1].pid, 0.5)  # the write finds it dead: a new one
        second = keeper._proc
        assert second is not None and second.pid != first.pid and second.poll() is None
        assert second.stdin is not None
        second.stdin.close()  # as the worker's death would
        second.wait(timeout=10)
        for sleeper in sleepers:
            assert sleeper.wait(timeout=10) == -signal.SIGTERM
    finally:
        for sleeper in sleepers:
            if sleeper.poll() is None:
                sleeper.kill()
                sleeper.wait()


def test_the_keeper_stops_a_group_at_its_deadline_while_the_worker_lives() -> None:
    """A stopped worker (SIGSTOP, a paused host) neither beats nor fences: the keeper, a
    process of its own, stops its task at the run's deadline, never before it; a deadline
    moved later (the lease confirmed again) is the one kept."""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    keeper = command._Keeper()
    try:
        first = time.monotonic() + 0.3
        keeper.register(sleeper.pid, 0.5, first)
        moved = time.monotonic() + 1.0
        keeper.extend(sleeper.pid, moved)
        assert sleeper.wait(timeout=10) == -signal.SIGTERM  # its pipe still open
        assert time.monotonic() >= moved
        assert keeper._proc is not None and keeper._proc.poll() is None  # it keeps watch
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        if keeper._proc is not None and keeper._proc.stdin is not None:
            keeper._proc.stdin.close()
            keeper._proc.wait(timeout=10)


def test_a_command_task_is_stopped_at_its_runs_deadline_by_the_keeper() -> None:
    """The deadline a worker gives a run (kit.tasks.context.Cancel.hold_until) reaches the
    keeper with the task's group; nobody sets the cancel flag, as in a stopped worker."""
    from kit.tasks.context import Cancel

    cancel = Cancel()
    cancel.hold_until(time.monotonic() + 0.5)
    result = run_command({"argv": [PY, "-c", "import time; time.sleep(30)"]}, ctx(cancel=cancel))
    assert not result.ok and result.error is not None
    assert result.error.startswith("killed by SIGTERM"), result.error
