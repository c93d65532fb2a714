"""Consumer lag of the workers, per priority tier, as the broker sees it (fleet view).

The workers' TieredConsumer consumes tier T of group G as consumer group `G.T` on topic
`<prefix>.T`. A tier's lag is, over its partitions, the high watermark minus the
group's committed offset (minus the log start where nothing was committed yet: the
consumer starts from the earliest message). This asks the broker, so it is right even
when no worker is alive, which is when it matters.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from kit.core.dispatch import PRIORITY_TIERS
from kit.transport.message import DEFAULT_TOPIC_PREFIX, topic_for

# Offsets are read with a plain consumer of the tier's group that never subscribes (so
# it joins nothing and moves no partition): `committed()` and the watermarks. The
# admin client's list_consumer_group_offsets crashed this process (SIGSEGV) once when
# the group coordinator was still loading (confluent-kafka-python#1982), and the api
# serves this view, so it is not used.


@dataclass(frozen=True)
class TierLag:
    tier: str
    topic: str
    lag: int | None  # None: the topic does not exist (yet)
    partitions: int


def tier_lags(
    bootstrap: str,
    group_id: str,
    *,
    topic_prefix: str = DEFAULT_TOPIC_PREFIX,
    timeout_s: float = 5.0,
) -> list[TierLag]:
    """Lag per tier, highest tier first. Raises KafkaException when the broker does
    not answer within the timeout."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
    topics = admin.list_topics(timeout=timeout_s).topics
    out: list[TierLag] = []
    for tier in PRIORITY_TIERS:
        topic = topic_for(tier, topic_prefix)
        meta = topics.get(topic)
        if meta is None or meta.error is not None:
            out.append(TierLag(tier, topic, None, 0))
            continue
        parts = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{group_id}.{tier}",
                "enable.auto.commit": False,
                "socket.timeout.ms": 3000,
            }
        )
        try:
            committed = consumer.committed(parts, timeout=timeout_s)
            lag = 0
            for tp in committed:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, tp.partition), timeout=timeout_s
                )
                start = tp.offset if tp.offset >= 0 else low  # nothing committed: from the start
                lag += max(0, high - start)
        finally:
            consumer.close()
        out.append(TierLag(tier, topic, lag, len(parts)))
    return out
