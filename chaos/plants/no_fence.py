"""Planted bug (worker): no fence at all. A worker that cannot confirm its leases (cut off
from PostgreSQL) neither stops its tasks itself, nor has the keeper stop them at their
deadline, nor stops them when a beat after the cut finds the lease gone; so a task runs
on while the reaper hands its run to another worker (or to this one, once reconnected):
the worker-cut drill must report the two executions overlapping. Without the last part,
a run whose message comes back to the cut worker's own partition is claimed only after
the cut heals, when the first beat may stop the old task just before the new attempt
starts, and the drill catches the plant only when the other workers take the run."""

from __future__ import annotations

from typing import Any

from chaos.plants import keeper_ignores_deadlines
from kit.worker import worker as worker_module


def plant() -> None:
    keeper_ignores_deadlines.plant()
    worker_module.Worker._fence_pass = lambda self, now: None  # type: ignore[method-assign]
    beat = worker_module.runs_heartbeat

    def beat_never_lost(*args: Any, **kwargs: Any) -> Any:
        kept, _lost = beat(*args, **kwargs)
        return kept, set()

    worker_module.runs_heartbeat = beat_never_lost  # type: ignore[assignment]


if __name__ == "__main__":
    plant()
    from kit.cli import main

    raise SystemExit(main())
