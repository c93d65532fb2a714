"""kit.stack.process.running: a process counts as running until it exits; a zombie (exited,
not reaped) does not, which is what a test or a benchmark waiting for a task to be gone
needs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kit.stack.process import running


def test_this_process_runs() -> None:
    assert running(os.getpid())


def test_an_exited_child_not_yet_reaped_is_not_running_though_its_pid_exists() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # exited, not reaped: /proc says Z
        with open(f"/proc/{child.pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    else:
        raise AssertionError("the child never became a zombie")
    os.kill(child.pid, 0)  # the pid still exists
    assert not running(child.pid)
    child.wait()
    assert not running(child.pid)


def test_a_sleeping_child_runs_until_it_is_killed_and_reaped() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert running(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not running(child.pid)
