"""Planted bug (worker): the run is written succeeded before its task runs (an ack
before the effect). A worker killed while the task works towards its effect leaves a
run marked succeeded that never took effect: the drill must report it lost."""

from __future__ import annotations

from kit.store.claims import runs_finish_ok
from kit.worker import worker as worker_module


def plant() -> None:
    original = worker_module.Worker._execute

    def execute_acked_first(self, entry) -> None:  # type: ignore[no-untyped-def]
        run = entry.run
        if run.task_spec is not None:
            runs_finish_ok(self.engine, [(run.run_id, run.lease_token)])
        original(self, entry)

    worker_module.Worker._execute = execute_acked_first  # type: ignore[method-assign]


if __name__ == "__main__":
    plant()
    from kit.cli import main

    raise SystemExit(main())
