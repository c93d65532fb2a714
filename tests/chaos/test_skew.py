"""The clock-skew harness (chaos.skew): a process under it reads a wall clock moved by the
offset, and its timed waits still last what they ask for, whichever way it is moved:
the GIL's, an Event's, a Condition's, a queue's. They run on the unfaked monotonic
clock, which is why libfaketime's "forced monotonic fix" can be off (chaos.skew)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.skew import ClockSkew, libfaketime_path

pytestmark = pytest.mark.skipif(
    libfaketime_path() is None, reason="libfaketime is installed by scripts/test.sh"
)

PROBE = """
import json, queue, threading, time
waits = {}
t = time.monotonic(); threading.Event().wait(0.3); waits["event"] = time.monotonic() - t
c = threading.Condition()
t = time.monotonic()
with c:
    c.wait(0.3)
waits["condition"] = time.monotonic() - t
t = time.monotonic()
try:
    queue.Queue().get(timeout=0.3)
except queue.Empty:
    pass
waits["queue"] = time.monotonic() - t
done = []
def spin():
    x = 0
    for _ in range(200_000):
        x += 1
    done.append(x)
threads = [threading.Thread(target=spin) for _ in range(3)]
for th in threads: th.start()
for th in threads: th.join()
print(json.dumps({"wall": time.time(), "waits": waits, "spun": len(done)}))
"""


def _probe(skew: ClockSkew) -> dict[str, object]:
    env = os.environ | skew.env()
    before = time.time()
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-500:]
    out = json.loads(done.stdout)
    out["offset"] = float(out["wall"]) - before  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("offset_s", [20.0, -15.0])
def test_a_skewed_process_reads_the_moved_clock_and_waits_as_long_as_it_asks(
    tmp_path: Path, offset_s: float
) -> None:
    skew = ClockSkew(tmp_path / "skew" / "clock")
    skew.set(offset_s)
    assert skew.env()["FAKETIME_FORCE_MONOTONIC_FIX"] == "0"
    out = _probe(skew)
    # the offset, plus the child's own start-up and run (a few seconds at most)
    assert offset_s <= float(out["offset"]) < offset_s + 10  # type: ignore[arg-type]
    for name, waited in out["waits"].items():  # type: ignore[union-attr]
        assert 0.29 <= waited < 3.0, f"{name} wait of 0.3 s lasted {waited:.3f} s"
    assert out["spun"] == 3  # threads handing the GIL over each other all ran to the end
