"""A partition lease's epoch, the fencing token, against the real PostgreSQL: a takeover
bumps it, a renewal keeps it, and a scan that offers the old one locks nothing. (The
contract suite, tests/contract/test_partition_lease.py, walks the same statements at
random beside kit.core.leases; this is the takeover spelled out.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, text

from kit.store import scheduling as sql

pytestmark = pytest.mark.integration
TTL_MS = 10_000
P = 7


def test_a_takeover_bumps_the_epoch_and_fences_the_old_owner(engine: Engine) -> None:
    with engine.connect() as conn:
        t0 = conn.execute(text("SELECT now()")).scalar_one()
    ttl = timedelta(milliseconds=TTL_MS)

    def acquire(node: str, at: timedelta) -> dict[int, int]:
        with engine.begin() as conn:
            return sql.leases_acquire(conn, node, [P], TTL_MS, t0 + at)

    def locks(node: str, epoch: int, at: timedelta) -> set[int]:
        with engine.begin() as conn:
            return sql.partitions_lock_own(conn, node, {P: epoch}, t0 + at)

    first = acquire("a", timedelta(0))[P]
    assert acquire("a", ttl / 2) == {P: first}  # a's renewal keeps its epoch
    assert acquire("b", ttl) == {}  # a renewed at ttl/2: live until 1.5 ttl
    taken = acquire("b", ttl * 1.5)  # a's lease expired: b takes it over
    assert taken == {P: first + 1}
    assert locks("a", first, ttl * 1.5) == set()  # a, still believing its epoch, is fenced
    assert locks("b", first, ttl * 1.5) == set()  # the old epoch fences anyone
    assert locks("b", first + 1, ttl * 1.5) == {P}
    # the old owner taking it back after b's expiry is a takeover too: a new epoch
    assert acquire("a", ttl * 2.5) == {P: first + 2}
    assert locks("b", first + 1, ttl * 2.5) == set()
