"""Planted bug (worker): the keeper of command tasks stops a task only when its worker is
gone, not at its run's deadline. A worker frozen past its leases cannot fence, so its
task runs on while the reaper hands the run to another worker: the worker-freeze drill
must report the two executions overlapping."""

from __future__ import annotations

from kit.tasks import command


def plant() -> None:
    keeper = command._keeper
    register = keeper.register

    def register_without_deadline(pgid: int, grace_s: float, until: float | None = None) -> None:
        register(pgid, grace_s, None)

    keeper.register = register_without_deadline  # type: ignore[method-assign]
    keeper.extend = lambda pgid, until: None  # type: ignore[method-assign]


if __name__ == "__main__":
    plant()
    from kit.cli import main

    raise SystemExit(main())
