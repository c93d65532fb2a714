"""The kit creates its own run topics, one per priority tier, and the dead-letter topic
for messages a worker cannot use, when they are missing.

Replication factor and min.insync.replicas are settings (CRONFLEET_RUN_TOPIC_REPLICATION,
CRONFLEET_RUN_TOPIC_MIN_INSYNC): 3 and 2 by default, so acks=all means "on two brokers"
and losing one broker loses no run message; the one-broker local stack writes 1 and 1.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kit.core.dispatch import PRIORITY_TIERS
from kit.transport.kafka_client import client_config
from kit.transport.message import DEFAULT_TOPIC_PREFIX, dead_letter_topic, topic_for


class TopicError(RuntimeError):
    pass


def ensure_topics(
    bootstrap: str,
    partitions: int = 6,
    *,
    replication_factor: int = 1,
    min_insync_replicas: int | None = None,
    prefix: str = DEFAULT_TOPIC_PREFIX,
    tiers: Sequence[str] = PRIORITY_TIERS,
    timeout_s: float = 30.0,
    config: dict[str, str] | None = None,
) -> list[str]:
    """Create the missing tier topics and wait until every partition has a leader.

    Returns the topics this call created (empty when all existed). An existing topic
    is left as it is, even with another partition count: repartitioning a live run
    topic would reorder a job's runs, so that is an operator's decision.
    """
    if partitions < 1:
        raise ValueError("partitions: must be >= 1")
    if min_insync_replicas is not None and not 1 <= min_insync_replicas <= replication_factor:
        raise ValueError("min_insync_replicas: must be between 1 and the replication factor")
    config = dict(config or {})
    # The broker stamps each message when it appends it: the acknowledged time that
    # dispatch lag is measured from (kit.transport.publisher.publish_encoded).
    config.setdefault("message.timestamp.type", "LogAppendTime")
    if min_insync_replicas is not None:
        config.setdefault("min.insync.replicas", str(min_insync_replicas))
    admin = AdminClient({**client_config(bootstrap)})
    wanted = [topic_for(t, prefix) for t in tiers] + [dead_letter_topic(prefix)]
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    missing = [t for t in wanted if t not in existing]
    created: list[str] = []
    if missing:
        futures = admin.create_topics(
            [NewTopic(t, partitions, replication_factor, config=config) for t in missing],
            request_timeout=timeout_s,
        )
        for topic, future in futures.items():
            try:
                future.result(timeout=timeout_s)
                created.append(topic)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicError(f"creating {topic}: {exc.args[0].str()}") from None
    _wait_for_leaders(admin, wanted, timeout_s)
    return created


def _wait_for_leaders(admin: AdminClient, topics: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(timeout=max(1.0, deadline - time.monotonic())).topics
        not_ready = [
            t
            for t in topics
            if t not in meta
            or meta[t].error is not None
            or not meta[t].partitions
            or any(p.leader < 0 for p in meta[t].partitions.values())
        ]
        if not not_ready:
            return
        if time.monotonic() >= deadline:
            raise TopicError(f"topics without a leader after {timeout_s} s: {not_ready}")
        time.sleep(0.1)


def topics_forget(bootstrap: str, topic_prefix: str, group_prefix: str) -> list[str]:
    """Delete the topics and consumer groups whose names start so (a run of the drills or
    a test is done with its own). A group that still has members (a static member stays
    for its session) is left as it is. Returns the topics deleted."""
    admin = AdminClient({**client_config(bootstrap)})
    names = admin.list_topics(timeout=30).topics
    topics = sorted(t for t in names if t.startswith(topic_prefix))
    if topics:
        for done in admin.delete_topics(topics, operation_timeout=60).values():
            with contextlib.suppress(Exception):  # deleted meanwhile, or a later call's
                done.result(timeout=120)
    listed = admin.list_consumer_groups(request_timeout=30).result(timeout=60)
    groups = sorted(g.group_id for g in listed.valid if g.group_id.startswith(group_prefix))
    if groups:
        for done in admin.delete_consumer_groups(groups, request_timeout=30).values():
            with contextlib.suppress(Exception):  # not empty yet: a later call's
                done.result(timeout=60)
    return topics
