"""The partition lease, side by side: every step goes to kit.core.leases (the functions the
model runs and the docs' table describes) and to the PostgreSQL store (the statements a
scheduler node runs: kit.store.scheduling's acquire, release, owners and the scan's
fenced lock), with the same explicit time, and the two must agree after every step.

Several nodes contend for a few partitions; each node remembers the epoch it was granted
(as kit.scheduler.leases.PartitionLeases does) and offers it, or a stale or unknown one,
on its later writes. A node renews by re-acquiring what it holds (one batched upsert):
the renewal keeps its epoch exactly when kit.core.leases.renew_partition grants it.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from sqlalchemy import Engine, text

from kit.core import leases as core
from kit.core.leases import PartitionLease
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from kit.store import scheduling as sql
from tests.contract.replay import replay

pytestmark = pytest.mark.integration

TTL_MS = 10_000
NODES = ("a", "b", "c")
PARTS = (0, 1, 2)
_base = iter(range(10**6))

# What the suite reached, by step and outcome, numbers and names masked: a suite that
# never reaches a branch cannot notice when one side changes it.
REACHED: Counter[str] = Counter()
MUST_REACH = {
    "acquire: granted new",
    "acquire: granted renewal",
    "acquire: granted takeover",
    "acquire: held by X until N",
    "renew: granted",
    "renew: expired at N",
    "release: granted",
    "release: not owner (owner is X)",
    "release: stale epoch N (current N)",
    "release: unknown epoch N (current N)",
    "fenced write: allowed",
    "fenced write: not owner",
    "fenced write: other epoch",
    "fenced write: expired",
}


def reached(step: str, outcome: str) -> None:
    masked = re.sub(r"\d+", "N", outcome)
    REACHED[f"{step}: " + re.sub(r"\b(?:a|b|c|None)\b", "X", masked)] += 1


def _write_outcome(lease: PartitionLease | None, node: str, epoch: int, now_ms: int) -> str:
    if lease is None or lease.owner != node:
        return "not owner"
    if lease.epoch != epoch:
        return "other epoch"
    return "expired" if now_ms >= lease.expires_at_ms else "allowed"


def partition_lease_machine(engine: Engine) -> type[RuleBasedStateMachine]:
    class PartitionLeaseContract(RuleBasedStateMachine):
        @initialize()
        def no_leases(self) -> None:
            n = next(_base)
            self.now_ms = to_epoch_ms(datetime(2031, 1, 1, tzinfo=UTC)) + n * 86_400_000
            with engine.begin() as conn:
                conn.execute(text("DELETE FROM partition_leases"))
            self.core: dict[int, PartitionLease | None] = dict.fromkeys(PARTS)
            # what each node believes it holds (partition -> epoch granted), as a node does
            self.believed: dict[str, dict[int, int]] = {node: {} for node in NODES}

        @property
        def now(self) -> datetime:
            return from_epoch_ms(self.now_ms)

        def _epoch(self, node: str, p: int, pick: int) -> int:
            """The epoch `node` offers for `p`: mostly the one it believes, sometimes a
            stale or unknown one."""
            lease = self.core[p]
            current = lease.epoch if lease is not None else 0
            believed = self.believed[node].get(p, current)
            return [believed, believed, current, current - 1, current + 1][pick % 5]

        @rule(ms=st.integers(0, 2 * TTL_MS))
        def time_passes(self, ms: int) -> None:
            self.now_ms += ms

        @rule(p=st.sampled_from(PARTS), delta=st.sampled_from([-1, 0, 1]))
        def until_expiry(self, p: int, delta: int) -> None:
            """Time runs to just before, at or just after a lease's expiry: the edges."""
            lease = self.core[p]
            if lease is not None and lease.owner is not None:
                self.now_ms = max(self.now_ms, lease.expires_at_ms + delta)

        @rule(node=st.sampled_from(NODES), parts=st.sets(st.sampled_from(PARTS), min_size=1))
        def acquire_or_renew(self, node: str, parts: set[int]) -> None:
            with engine.begin() as conn:
                granted = sql.leases_acquire(conn, node, parts, TTL_MS, self.now)
            for p in sorted(parts):
                before = self.core[p]
                d = core.acquire_partition(before, p, node, self.now_ms, TTL_MS)
                assert (p in granted) == d.granted, (p, d.reason)
                if not d.granted:
                    reached("acquire", d.reason or "")
                elif before is None:
                    reached("acquire", "granted new")
                else:
                    kept = d.lease.epoch == before.epoch
                    reached("acquire", "granted renewal" if kept else "granted takeover")
                if d.granted:
                    assert granted[p] == d.lease.epoch
                held = self.believed[node].get(p)
                if held is not None and before is not None:
                    # the node's renewal: it keeps the partition iff renew_partition grants
                    renewed = core.renew_partition(before, node, held, self.now_ms, TTL_MS)
                    assert (granted.get(p) == held) == renewed.granted, renewed.reason
                    reached("renew", "granted" if renewed.granted else renewed.reason or "")
                self.core[p] = d.lease
                if d.granted:
                    self.believed[node][p] = d.lease.epoch
                else:
                    self.believed[node].pop(p, None)

        @rule(node=st.sampled_from(NODES), p=st.sampled_from(PARTS), pick=st.integers(0, 4))
        def release(self, node: str, p: int, pick: int) -> None:
            self._release(node, p, self._epoch(node, p, pick))

        @rule(p=st.sampled_from(PARTS), pick=st.integers(0, 4))
        def believer_releases(self, p: int, pick: int) -> None:
            """As a stopping node does: one that believes it holds `p` gives it up."""
            if believers := self._believers(p):
                node = believers[pick % len(believers)]
                self._release(node, p, self._epoch(node, p, pick))

        def _believers(self, p: int) -> list[str]:
            return [node for node in NODES if p in self.believed[node]]

        def _release(self, node: str, p: int, epoch: int) -> None:
            with engine.begin() as conn:
                released = sql.leases_release(conn, node, {p: epoch}, self.now)
            lease = self.core[p]
            granted = False
            if lease is not None:
                d = core.release_partition(lease, node, epoch)
                granted = d.granted
                self.core[p] = d.lease
                reached("release", "granted" if granted else d.reason or "")
            assert (released == [p]) == granted
            if granted:
                self.believed[node].pop(p, None)

        @rule(node=st.sampled_from(NODES), p=st.sampled_from(PARTS), pick=st.integers(0, 4))
        def fenced_write(self, node: str, p: int, pick: int) -> None:
            self._fenced_write(node, p, self._epoch(node, p, pick))

        @rule(p=st.sampled_from(PARTS), pick=st.integers(0, 4))
        def believer_writes(self, p: int, pick: int) -> None:
            """As a node's scan does: a node that believes it holds `p` (its lease may
            have expired or been taken over since) locks it at the epoch it offers."""
            if believers := self._believers(p):
                node = believers[pick % len(believers)]
                self._fenced_write(node, p, self._epoch(node, p, pick))

        def _fenced_write(self, node: str, p: int, epoch: int) -> None:
            with engine.begin() as conn:
                locked = sql.partitions_lock_own(conn, node, {p: epoch}, self.now)
            lease = self.core[p]
            allowed = lease is not None and core.fenced_write_allowed(
                lease, node, epoch, self.now_ms
            )
            assert (p in locked) == allowed, (lease, node, epoch, self.now_ms)
            outcome = _write_outcome(lease, node, epoch, self.now_ms)
            assert (outcome == "allowed") == allowed  # the suite's own reading of the rule
            reached("fenced write", outcome)

        @rule()
        def owners(self) -> None:
            with engine.begin() as conn:
                owners = sql.lease_owners(conn, self.now)
            live = {
                p: lease.owner
                for p, lease in self.core.items()
                if lease is not None and lease.live(self.now_ms)
            }
            assert owners == live

        @invariant()
        def store_equals_core(self) -> None:
            if not hasattr(self, "core"):
                return
            with engine.begin() as conn:
                rows = {
                    r.partition_id: r
                    for r in conn.execute(
                        text("SELECT partition_id, owner, epoch, expires_at FROM partition_leases")
                    )
                }
            for p in PARTS:
                lease = self.core[p]
                if lease is None:
                    assert p not in rows
                    continue
                row = rows[p]
                assert (row.owner, row.epoch) == (lease.owner, lease.epoch)
                # a free lease's expiry means nothing (the core says 0, the store the
                # release's instant): neither is live, and the next acquire bumps the epoch
                if lease.owner is not None:
                    assert to_epoch_ms(row.expires_at) == lease.expires_at_ms

    return PartitionLeaseContract


def test_partition_lease_store_equals_core(engine: Engine) -> None:
    REACHED.clear()
    replay(partition_lease_machine(engine), examples=100, steps=30)
    missed = MUST_REACH - set(REACHED)
    assert not missed, f"the suite never reached {sorted(missed)}; it reached {dict(REACHED)}"
