"""A scheduler node cut off from PostgreSQL in the middle of its scan must not stop the
other nodes: the chaos drill `scheduler-partition` found every node's scheduling stalled
for as long as the cut lasted (and the other node losing its own partitions), because
the cut node's open scan transaction kept its lease rows locked FOR SHARE, so the other
node's lease pass waited on them; with the link never healing, PostgreSQL would hold
those locks until TCP keepalive gave up on the dead client (hours by default).

Real PostgreSQL; the cut is tests/integration/netcut.py (bytes dropped both ways); the
wait has a deadline, nothing is timed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from kit.scheduler.node import NodeConfig, SchedulerNode, scheduler_engine
from kit.store import scheduling as sql
from tests.integration.netcut import CuttableLink
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

TTL_MS = 2000
PARTITIONS = 16
DEADLINE_S = 20.0  # ten lease TTLs: the takeover needs about two


class _NoPublish:
    def publish(self, messages, timeout_s: float = 10.0) -> None:
        pass

    def publish_encoded(self, messages, timeout_s: float = 10.0) -> None:
        pass


@pytest.fixture
def link(db_url: str) -> Iterator[CuttableLink]:
    url = make_url(db_url)
    cut = CuttableLink(url.host or "127.0.0.1", url.port or 5432)
    yield cut
    cut.close()


def _owners(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT owner, count(*) FROM partition_leases WHERE expires_at > now() "
                "GROUP BY owner"
            )
        ).all()
    return {r[0]: r[1] for r in rows}


def test_a_node_cut_off_mid_scan_does_not_hold_the_others_back(
    db_url: str, link: CuttableLink
) -> None:
    config = NodeConfig(partitions=PARTITIONS, lease_ttl_ms=TTL_MS, heartbeat_ms=500)
    direct = scheduler_engine(db_url, config)
    via_link = make_url(db_url).set(port=link.port).render_as_string(hide_password=False)
    cut_off = scheduler_engine(via_link, config)
    a = SchedulerNode(direct, _NoPublish(), "a", config)
    b = SchedulerNode(cut_off, _NoPublish(), "b", config)
    try:
        for _ in range(3):
            a.lease_pass()
            b.lease_pass()
        assert _owners(direct) == {"a": PARTITIONS // 2, "b": PARTITIONS // 2}
        # b is inside a scan: its lease rows are locked FOR SHARE, then its link dies
        conn = cut_off.connect()
        conn.begin()  # never ended: its link dies under it
        assert sql.partitions_lock_own(conn, "b", b.leases.scannable())
        link.cut()
        # b's lease runs out (by the database's clock); a should take its partitions over
        wait_until("b's leases to expire", lambda: "b" not in _owners(direct), DEADLINE_S)
        passes = threading.Thread(target=lambda: _keep_passing(a), daemon=True)
        passes.start()
        wait_until(
            "a to hold every partition",
            lambda: _owners(direct) == {"a": PARTITIONS},
            DEADLINE_S,
            lambda: f"a holds {_owners(direct)}: b's open scan transaction blocks it",
            poll_s=0.2,
        )
    finally:
        link.close()  # b's backend sees its client gone; anything still blocked ends
        direct.dispose()
        cut_off.dispose(close=False)  # b's connections are dead: do not wait on them


def _keep_passing(node: SchedulerNode) -> None:
    for _ in range(200):
        try:
            node.lease_pass()
        except Exception:
            return
        time.sleep(0.1)  # kept: the node's own pace between lease passes, not a wait
