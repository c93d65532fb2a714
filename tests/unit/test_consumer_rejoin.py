"""When a tier's consumer takes a fence for its own doing (kit.transport.consumer): only
after its own session was lost, once per loss, and only for the consumer that lost it.
No broker: librdkafka's consumers are made but never reach one."""

from __future__ import annotations

import time

import pytest

from kit.transport.consumer import TieredConsumer, _TierLog

SESSTMOUT = "SESSTMOUT [rdkafka#consumer-1] [thrd:main]: Consumer group session timed out"


@pytest.fixture
def consumer():  # type: ignore[no-untyped-def]
    c = TieredConsumer("127.0.0.1:1", "g", ("normal",), session_timeout_ms=6_000, instance_id="w1")
    yield c
    for tier in c._tiers:  # never joined: closing would wait for a broker
        del tier.consumer


def test_a_fence_with_no_session_lost_is_another_workers(consumer) -> None:  # type: ignore[no-untyped-def]
    assert not consumer._fenced_by_itself(consumer._tiers[0])


def test_a_fence_after_its_own_session_was_lost_is_its_own(consumer) -> None:  # type: ignore[no-untyped-def]
    tier = consumer._tiers[0]
    _TierLog(tier).log(30, "%s", SESSTMOUT)
    assert tier.session_lost_at is not None
    assert consumer._fenced_by_itself(tier)
    tier.session_lost_at = time.monotonic() - 3 * 6 - 0.1  # three sessions ago: not ours
    assert not consumer._fenced_by_itself(tier)


def test_other_log_lines_and_a_fenced_consumers_lines_note_nothing(consumer) -> None:  # type: ignore[no-untyped-def]
    tier = consumer._tiers[0]
    _TierLog(tier).log(40, "%s", "FAIL [rdkafka#consumer-1] connect failed")
    assert tier.session_lost_at is None
    old_log = _TierLog(tier)
    tier.generation += 1  # a new consumer joined: the fenced one's lines are not its own
    old_log.log(30, "%s", SESSTMOUT)
    assert tier.session_lost_at is None


def test_a_session_lost_before_the_consumer_joined_is_not_its_own(consumer) -> None:  # type: ignore[no-untyped-def]
    tier = consumer._tiers[0]
    _TierLog(tier).log(30, "%s", SESSTMOUT)
    tier.joined_at = time.monotonic() + 1  # joined again after that loss
    assert not consumer._fenced_by_itself(tier)
