"""Start a kit service the way a drill needs it: `python -m chaos.launch MODULE ARGS...`
runs MODULE as `__main__` with ARGS (MODULE is `kit.cli`, or a test's wrapper that
plants a bug and then calls `kit.cli.main`).

With CRONFLEET_CHAOS_SLEEP_FIX=1 (a process under libfaketime, see chaos.skew),
`time.sleep` first gets a select()-based body: libfaketime 0.9.10 breaks the absolute
monotonic sleep Python 3.11 uses; select() waits on the unfaked monotonic clock.
"""

from __future__ import annotations

import os
import runpy
import select
import sys
import time


def _select_sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        select.select([], [], [], left)


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m chaos.launch MODULE [ARGS...]", file=sys.stderr)
        raise SystemExit(2)
    if os.environ.get("CRONFLEET_CHAOS_SLEEP_FIX") == "1":
        time.sleep = _select_sleep
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
