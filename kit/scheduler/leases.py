"""A node's view of its partitions: heartbeat, target from kit.core.partitions,
acquire/renew in one batched upsert, graceful release.

A partition the node should no longer own is released on the same pass: it is not
scanned any more, and what this node committed for it is published whoever owns it
now (publishing is not fenced: the run exists, a second message claims nothing), so
the next owner starts where this one stopped and nothing waits for the reaper.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine

from kit.core.partitions import assign_partitions
from kit.crash import crash_point
from kit.store import scheduling as sql


@dataclass
class LeasePass:
    live_nodes: list[str]
    target: set[int]
    gained: set[int] = field(default_factory=set)
    lost: set[int] = field(default_factory=set)  # renewal refused / epoch changed
    released: set[int] = field(default_factory=set)


class PartitionLeases:
    def __init__(self, engine: Engine, node_id: str, partitions: int, ttl_ms: int) -> None:
        self.engine = engine
        self.node_id = node_id
        self.partitions = partitions
        self.ttl_ms = ttl_ms
        self.epochs: dict[int, int] = {}  # held partition -> epoch (draining ones too)
        self.draining: set[int] = set()

    def scannable(self) -> dict[int, int]:
        return {p: e for p, e in self.epochs.items() if p not in self.draining}

    def refresh(self) -> LeasePass:
        """Heartbeat, compute the target, take/renew, release the partitions not in it."""
        with self.engine.begin() as conn:
            sql.node_heartbeat(conn, self.node_id)
            live = sql.nodes_live(conn, self.ttl_ms)
            if self.node_id not in live:
                live.append(self.node_id)
            owners = sql.lease_owners(conn)
        crash_point("partition_lease.member")
        target_map = assign_partitions(self.partitions, live, owners)
        target = {p for p, n in target_map.items() if n == self.node_id}
        with self.engine.begin() as conn:
            granted = sql.leases_acquire(conn, self.node_id, target | set(self.epochs), self.ttl_ms)
        crash_point("partition_lease.acquired")
        result = LeasePass(live, target)
        for p, old in list(self.epochs.items()):
            if granted.get(p) != old:
                result.lost.add(p)
                del self.epochs[p]
                self.draining.discard(p)
        for p, e in granted.items():
            if p not in self.epochs:
                self.epochs[p] = e
                result.gained.add(p)
        self.draining = {p for p in self.epochs if p not in target}
        result.released = self.release(set(self.draining))
        return result

    def release(self, partitions: set[int]) -> set[int]:
        if not partitions:
            return set()
        with self.engine.begin() as conn:
            done = sql.leases_release(
                conn, self.node_id, {p: self.epochs[p] for p in partitions if p in self.epochs}
            )
        crash_point("partition_lease.released", done)
        for p in done:
            self.epochs.pop(p, None)
            self.draining.discard(p)
        return set(done)

    def drop(self, partitions: set[int]) -> None:
        """Forget partitions a scan found fenced off."""
        for p in partitions:
            self.epochs.pop(p, None)
            self.draining.discard(p)

    def leave(self) -> None:
        """Graceful exit: release every lease and the membership row."""
        self.release(set(self.epochs))
        with self.engine.begin() as conn:
            sql.node_leave(conn, self.node_id)
