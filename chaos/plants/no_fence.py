"""Planted bug (worker): no fence at all. A worker that cannot confirm its leases (cut off
from PostgreSQL) neither stops its tasks itself nor has the keeper stop them at their
deadline, so a task runs on while the reaper hands its run to another worker: the
worker-cut drill must report the two executions overlapping."""

from __future__ import annotations

from chaos.plants import keeper_ignores_deadlines
from kit.worker import worker as worker_module


def plant() -> None:
    keeper_ignores_deadlines.plant()
    worker_module.Worker._fence_pass = lambda self, now: None  # type: ignore[method-assign]


if __name__ == "__main__":
    plant()
    from kit.cli import main

    raise SystemExit(main())
