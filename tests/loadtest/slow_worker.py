"""A planted slow worker: `python tests/loadtest/slow_worker.py SECONDS worker [flags]`.

Every noop task sleeps SECONDS before it returns, then the real `cronfleet` CLI runs with
the rest of the arguments. No kit source is changed: the task tables are patched in this
process only (noop leaves the inline table, which starts a batch of runs at once on the
consume thread, so it takes a slot like any task and the slow slots delay the starts).
A storm against it must fail its p99 target (the load test's exit code).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any


def main() -> int:
    delay_s = float(sys.argv[1])
    import kit.tasks
    from kit.cli import main as cli_main

    real_noop = kit.tasks.RUNNERS["noop"]

    def slow_noop(spec: Mapping[str, Any], ctx: Any) -> Any:
        time.sleep(delay_s)
        return real_noop(spec, ctx)

    kit.tasks.RUNNERS["noop"] = slow_noop
    kit.tasks.INLINE.pop("noop", None)
    return cli_main(sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
