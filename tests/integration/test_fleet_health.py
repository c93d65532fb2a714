"""The fleet-wide gauges the alarms read (terraform/modules/observability): partitions no
node holds and dead letters waiting, computed from the database by the reaper."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from kit.reaper.reaper import Reaper
from kit.settings import Settings
from kit.store.fleet_health import fleet_health_read
from kit.transport import RunPublisher

pytestmark = pytest.mark.integration


def _lease(engine: Engine, partition: int, owner: str | None, expires_in_s: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO partition_leases (partition_id, owner, epoch, expires_at) "
                "VALUES (:p, :o, 1, now() + make_interval(secs => :s))"
            ),
            {"p": partition, "o": owner, "s": expires_in_s},
        )


def _dead_letter(engine: Engine, replayed: bool) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO dead_letters (run_id, job_id, tenant, replayed_at) "
                "VALUES (:r, :j, 'acme', CASE WHEN :replayed THEN now() END)"
            ),
            {"r": str(uuid.uuid4()), "j": str(uuid.uuid4()), "replayed": replayed},
        )


@pytest.fixture
def publisher(settings: Settings) -> Iterator[RunPublisher]:
    pub = RunPublisher(settings.kafka_bootstrap, topic_prefix=f"cf.health.{uuid.uuid4().hex[:8]}")
    yield pub
    pub.close()


def test_unowned_partitions_and_waiting_dead_letters(engine: Engine) -> None:
    assert fleet_health_read(engine, 8).partitions_unowned == 8
    _lease(engine, 0, "node-a", 30)
    _lease(engine, 1, "node-a", 30)
    _lease(engine, 2, "node-b", -5)  # expired: its node is gone
    _lease(engine, 3, None, 30)  # released
    _lease(engine, 9, "node-b", 30)  # beyond the partitions counted
    _dead_letter(engine, replayed=False)
    _dead_letter(engine, replayed=False)
    _dead_letter(engine, replayed=True)
    health = fleet_health_read(engine, 8)
    assert health.partitions_unowned == 6
    assert health.dead_letters_waiting == 2


def test_reaper_pass_publishes_the_gauges(engine: Engine, publisher: RunPublisher) -> None:
    _lease(engine, 5, "node-a", 30)
    _dead_letter(engine, replayed=False)
    reaper = Reaper(engine, publisher, 10_000, partitions=16)
    reaper.tick()
    value = reaper.metrics.registry.get_sample_value
    assert value("cronfleet_partitions_unowned") == 15
    assert value("cronfleet_dead_letters_waiting") == 1
