"""Planted bug (scheduler): a node scans every partition it ever held and fires their
triggers without locking its lease row at the epoch it believes, so after a rebalance
(or a takeover while it was away) it fires partitions another node owns: the drill must
report stale writes accepted."""

from __future__ import annotations

from kit.scheduler import leases as leases_module
from kit.store import scheduling


def plant() -> None:
    ever_held: dict[int, int] = {}
    original = leases_module.PartitionLeases.scannable

    def scannable_all(self) -> dict[int, int]:  # type: ignore[no-untyped-def]
        ever_held.update(original(self))
        return dict(ever_held)

    def lock_nothing(conn, node_id, epochs):  # type: ignore[no-untyped-def]
        return set(epochs)

    leases_module.PartitionLeases.scannable = scannable_all  # type: ignore[method-assign]
    scheduling.partitions_lock_own = lock_nothing


if __name__ == "__main__":
    plant()
    from kit.cli import main

    raise SystemExit(main())
