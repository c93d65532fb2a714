"""A drill ended by SIGTERM stops the fleet it started. Its services run in sessions of
their own (a fault may stop or kill a whole group), so nothing takes them down with the
drill: a soak killed by `kill` once left six services running, taking runs from the same
topics beside the next soak and spoiling its figures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.fleet import process_children
from chaos.stack import ChaosStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_drill_ended_by_sigterm_stops_its_fleet(chaos_stack: ChaosStack, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "kit.cli", "chaos", "run", "worker-kill", "--cycles", "20",
            "--seed", "5", "--out", str(tmp_path), "--no-model", "--keep-stack"]  # fmt: skip
    drill = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not (tmp_path / "worker-kill" / "journal").exists():
            assert drill.poll() is None, drill.stdout.read().decode()[-3000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the drill's fleet did not start"
            time.sleep(0.5)
        time.sleep(3)
        services = process_children().get(drill.pid, [])
        assert len(services) >= 5, services  # api, two scheduler nodes, workers, reaper
        drill.send_signal(signal.SIGTERM)
        code = drill.wait(timeout=180)
    finally:
        if drill.poll() is None:
            drill.kill()
    time.sleep(1)
    left = [pid for pid in services if _alive(pid)]
    for pid in left:
        os.killpg(pid, signal.SIGKILL)
    assert left == []
    assert code == 130  # as after Ctrl-C


SLEEPER = """
import signal, sys, threading, time
from chaos.drill import DrillContext

class Clock:
    def now_ms(self):
        return int(time.time() * 1000)

def interrupt(signum, frame):
    raise KeyboardInterrupt(signum)

signal.signal(signal.SIGTERM, interrupt)
# the main thread blocks SIGTERM, so the kernel hands it to the other thread, as it may
# in a drill whose ledger, sampler and supervisor threads run beside the main one
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
ready = threading.Event()

def other():
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    ready.set()
    time.sleep(60)

threading.Thread(target=other, daemon=True).start()
ready.wait()
print("sleeping", flush=True)
start = time.monotonic()
try:
    DrillContext.sleep_until(Clock(), Clock().now_ms() + 30_000)
except KeyboardInterrupt:
    print(f"stopped {time.monotonic() - start:.1f}", flush=True)
"""


def test_a_signal_taken_by_another_thread_stops_a_drill_between_its_cycles() -> None:
    """A soak sleeps minutes between nemesis cycles; a SIGTERM received by another of its
    threads went unheard until that sleep ended (the 2-hour soak went on through two)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SLEEPER], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "sleeping"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert out.startswith("stopped"), out
    assert float(out.split()[1]) < 5.0, f"the sleep went on after the signal: {out}"
