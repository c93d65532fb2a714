"""The partition_leases table of the model, as arrays, and kit.core's lease rules applied
to whole classes of partitions.

A node renews and fences its partitions every few seconds; 1,024 core calls (and lease
objects) per node per pass cost more than the rest of the model. The core's partition
lease functions (`renew_partition`, `fenced_write_allowed`, ...) decide from the lease's
owner, epoch and expiry, the node's believed epoch and the time, and return the same
partition id they were given: so partitions whose (owner, epoch, expiry, believed epoch)
are equal form an equivalence class, the core is asked once for a representative, and
its answer is applied to every member. That is exact, not an approximation: only the
partition id differs within a class, and no rule reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from kit.core import leases

FREE = -1


class PartitionTable:
    def __init__(self, n: int, names: Sequence[str]) -> None:
        self.n = n
        self.names = list(names)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.owner = np.full(n, FREE, np.int16)  # node index; FREE: no owner
        self.epoch = np.zeros(n, np.int64)  # 0: never held
        self.expires = np.zeros(n, np.int64)
        self.clock = 0  # write counter
        self.stamp = np.zeros(n, np.int64)  # clock of each partition's last write

    def get(self, p: int) -> leases.PartitionLease | None:
        if self.epoch[p] == 0:
            return None
        o = int(self.owner[p])
        return leases.PartitionLease(
            p, None if o == FREE else self.names[o], int(self.epoch[p]), int(self.expires[p])
        )

    def put(self, p: int, lease: leases.PartitionLease) -> None:
        self.write(np.array([p]), lease)

    def write(self, parts: np.ndarray, lease: leases.PartitionLease) -> None:
        """Every partition in `parts` takes the lease's owner, epoch and expiry."""
        self.owner[parts] = FREE if lease.owner is None else self.index[lease.owner]
        self.epoch[parts] = lease.epoch
        self.expires[parts] = lease.expires_at_ms
        self.clock += 1
        self.stamp[parts] = self.clock

    def owners(self, now_ms: int, live_names: Sequence[str]) -> dict[int, str]:
        """{partition: owner} for leases live now and held by a live member."""
        live = np.zeros(len(self.names) + 1, bool)
        for name in live_names:
            live[self.index[name]] = True
        held = (self.owner != FREE) & (self.expires > now_ms)
        ps = np.flatnonzero(held & live[self.owner])
        return dict(zip(ps.tolist(), (self.names[i] for i in self.owner[ps]), strict=True))


class LeaseClasses:
    """A node's partitions grouped by (owner, epoch, expiry, believed epoch). Rebuilt
    when anyone else wrote one of them since; a verdict the node applies to a whole
    class keeps its members equal, so the grouping stays valid."""

    def __init__(self, table: PartitionTable) -> None:
        self.t = table
        self.seen = -1
        self.parts: np.ndarray = np.empty(0, np.int64)
        self.members: list[np.ndarray] = []
        self.reps: list[int] = []

    def build(self, parts: np.ndarray, believed: np.ndarray) -> None:
        t = self.t
        self.parts = parts
        if parts.size == 0:
            self.members, self.reps = [], []
        else:
            keys = np.stack(
                (t.owner[parts].astype(np.int64), t.epoch[parts], t.expires[parts], believed[parts])
            )
            order = np.lexsort(keys[::-1])
            k = keys[:, order]
            cut = np.flatnonzero(np.any(k[:, 1:] != k[:, :-1], axis=0)) + 1
            self.members = np.split(parts[order], cut)
            self.reps = [int(m[0]) for m in self.members]
        self.seen = t.clock

    def ensure(self, parts: np.ndarray, believed: np.ndarray) -> None:
        if not self.fresh(parts):
            self.build(parts, believed)

    def fresh(self, parts: np.ndarray) -> bool:
        """`parts`: the node's current partitions (a new array whenever they change)."""
        if self.seen < 0 or parts is not self.parts:
            return False
        if self.seen == self.t.clock:  # nothing written anywhere since
            return True
        if parts.size == 0 or int(self.t.stamp[parts].max()) <= self.seen:
            self.seen = self.t.clock
            return True
        return False

    def verdicts(
        self, ask: Callable[[leases.PartitionLease, int], bool], believed: np.ndarray
    ) -> np.ndarray | None:
        """One core call per class: None when every class is allowed, else a boolean
        per partition id (False outside the classes)."""
        answers = []
        for rep in self.reps:
            lease = self.t.get(rep)
            answers.append(lease is not None and ask(lease, int(believed[rep])))
        if all(answers):
            return None
        out = np.zeros(self.t.n, bool)
        for members, yes in zip(self.members, answers, strict=True):
            out[members] = yes
        return out

    def apply(
        self,
        decide: Callable[[leases.PartitionLease, int], leases.LeaseDecision],
        believed: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Apply a lease decision class by class; returns (granted, refused) partitions.
        Granted members take the decision's lease (their own ids kept)."""
        granted: list[np.ndarray] = []
        refused: list[np.ndarray] = []
        for rep, members in zip(self.reps, self.members, strict=True):
            lease = self.t.get(rep)
            if lease is None:
                refused.append(members)
                continue
            d = decide(lease, int(believed[rep]))
            if d.granted:
                self.t.write(members, d.lease)
                granted.append(members)
            else:
                refused.append(members)
        self.seen = self.t.clock  # our own writes keep each class equal
        empty = np.empty(0, np.int64)
        return (
            np.concatenate(granted) if granted else empty,
            np.concatenate(refused) if refused else empty,
        )
