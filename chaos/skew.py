"""Clock skew with libfaketime (Debian's `libfaketime`): a service started with the
environment of a `ClockSkew` reads the wall clock (CLOCK_REALTIME) off by the offset
written in its timestamp file, which the drill rewrites while the service runs (the
library re-reads it within a second): a step ahead or behind, as a bad NTP day does.
The monotonic clock is left alone (FAKETIME_DONT_FAKE_MONOTONIC=1), as a real skew
leaves it.

libfaketime also wraps pthread_cond_timedwait, which CPython's GIL waits on at every
hand-over between threads. With its "forced monotonic fix" on (its default on glibc
2.30 and later) a threaded Python process under it did a tenth of the work of the same
process without it, at 1.5 cores (`benchmarks/skewed_threads.py`), and a 2-hour soak's
skewed worker fell behind its
partitions from the first minute (its fence thread starved 1.3-4.4 s at a time, 26
times in 15 minutes). The monotonic clock is not faked here, so the fix has nothing to
correct: FAKETIME_FORCE_MONOTONIC_FIX=0 turns it off, and timed waits still last what
they should, skewed either way (`tests/chaos/test_skew.py`).

libfaketime 0.9.10 (Debian 12) mistranslates an absolute sleep on the monotonic clock
when that clock is not faked: Python 3.11's `time.sleep` (clock_nanosleep with
TIMER_ABSTIME) then fails with EINVAL. A skewed service therefore starts through
`chaos.launch`, which gives `time.sleep` a select()-based body first
(`CRONFLEET_CHAOS_SLEEP_FIX=1`); nothing of the kit changes.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


class SkewError(RuntimeError):
    """libfaketime is missing or does not move the clock: the drill cannot skew."""


def libfaketime_path() -> str | None:
    override = os.environ.get("CRONFLEET_CHAOS_LIBFAKETIME")
    if override is not None:
        return override if Path(override).is_file() else None
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    return found[0] if found else None


@dataclass
class ClockSkew:
    timestamp_file: Path
    offset_s: float = 0.0

    def env(self) -> dict[str, str]:
        lib = libfaketime_path()
        if lib is None:
            raise SkewError(
                "libfaketime not found (apt-get install libfaketime; or set "
                "CRONFLEET_CHAOS_LIBFAKETIME to libfaketimeMT.so.1)"
            )
        if not self.timestamp_file.exists():
            self.set(self.offset_s)
        return {
            "LD_PRELOAD": lib,
            "FAKETIME_TIMESTAMP_FILE": str(self.timestamp_file),
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_FORCE_MONOTONIC_FIX": "0",
            "CRONFLEET_CHAOS_SLEEP_FIX": "1",
        }

    def set(self, offset_s: float) -> None:
        """The clock of every process started with env() moves to real time + offset_s."""
        self.offset_s = offset_s
        self.timestamp_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.timestamp_file.with_suffix(".tmp")
        tmp.write_text(f"{offset_s:+.3f}s\n")
        os.replace(tmp, self.timestamp_file)

    def measure(self) -> float:
        """The offset a fresh process under env() sees now (seconds), to prove the skew
        is real before a drill counts on it."""
        code = "import time; print(time.time())"
        env = os.environ | self.env()
        before = time.time()
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30
        )
        after = time.time()
        if done.returncode != 0:
            raise SkewError(f"a process under libfaketime failed: {done.stderr.strip()[-300:]}")
        return float(done.stdout) - (before + after) / 2

    def verify(self, tolerance_s: float = 1.0) -> float:
        seen = self.measure()
        if abs(seen - self.offset_s) > tolerance_s:
            raise SkewError(
                f"libfaketime did not skew the clock: asked {self.offset_s:+.1f} s, "
                f"a process saw {seen:+.1f} s"
            )
        return seen
