"""A drill leaves no topics or consumer groups on the drills' broker: every start of the
broker loads every partition it holds, and the leftovers of a few hundred drills made each
broker kill's restart 30 s longer (chaos.stack.ChaosStack.kafka_forget)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from chaos.stack import ChaosStack
from kit.transport import ensure_topics, topic_for
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration


def _topics(admin: AdminClient, prefix: str) -> set[str]:
    return {t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)}


def _committed(consumer: Consumer, offset: TopicPartition) -> bool:
    """A broker just started answers a commit "coordinator load in progress" for a while."""
    try:
        consumer.commit(offsets=[offset], asynchronous=False)
    except KafkaException:
        return False
    return True


def _groups(admin: AdminClient, prefix: str) -> set[str]:
    listed = admin.list_consumer_groups(request_timeout=30).result(timeout=60)
    return {g.group_id for g in listed.valid if g.group_id.startswith(prefix)}


def test_forgetting_a_drills_topics_and_groups_leaves_everything_else(
    chaos_stack: ChaosStack,
) -> None:
    tag = uuid.uuid4().hex[:8]
    bootstrap = chaos_stack.kafka_bootstrap
    ensure_topics(bootstrap, 1, prefix=f"chaos.{tag}")
    ensure_topics(bootstrap, 1, prefix=f"kept.{tag}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-{tag}.normal"})
    offset = TopicPartition(topic_for("normal", f"chaos.{tag}"), 0, 0)
    wait_until("the group's first commit", lambda: _committed(consumer, offset), 60)
    consumer.close()  # what a stopped drill's worker group leaves: offsets, no members
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = lambda: _groups(admin, f"chaos-{tag}.") == {f"chaos-{tag}.normal"}  # noqa: E731
    wait_until("the group listed", listed, 60)

    gone = chaos_stack.kafka_forget(f"chaos.{tag}.", f"chaos-{tag}.")

    assert gone and all(t.startswith(f"chaos.{tag}.") for t in gone)
    deadline = time.monotonic() + 60  # deleting is asynchronous in the broker
    while _topics(admin, f"chaos.{tag}.") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _topics(admin, f"chaos.{tag}.") == set()
    assert _groups(admin, f"chaos-{tag}.") == set()
    kept = _topics(admin, f"kept.{tag}.")
    assert len(kept) == len(gone)  # another prefix's topics stay
    chaos_stack.kafka_forget(f"kept.{tag}.", f"kept-{tag}.")
