"""How far the workers have read the run topics: high watermarks and the consumer
groups' committed offsets, per tier (for kit.core.recovery).

A plain consumer that never subscribes: with the workers' group id it can fetch the
group's committed offsets without joining the group (no rebalance for the workers).
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Consumer, TopicPartition

from kit.core.dispatch import PRIORITY_TIERS
from kit.transport.message import DEFAULT_TOPIC_PREFIX, topic_for

_TIMEOUT_S = 10.0


class QueueProgress:
    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        *,
        topic_prefix: str = DEFAULT_TOPIC_PREFIX,
        tiers: Sequence[str] = PRIORITY_TIERS,
    ) -> None:
        self._topics = {tier: topic_for(tier, topic_prefix) for tier in tiers}
        # one reader per tier: the workers' group for tier T is `<group>.<T>`
        self._readers = {
            tier: Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"{group_id}.{tier}",
                    "enable.auto.commit": False,
                }
            )
            for tier in tiers
        }

    @property
    def tiers(self) -> list[str]:
        return list(self._topics)

    def _partitions(self, tier: str) -> list[TopicPartition]:
        topic = self._topics[tier]
        meta = self._readers[tier].list_topics(topic, timeout=_TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        return [TopicPartition(topic, p) for p in sorted(meta.partitions)]

    def high_watermarks(self, tier: str) -> dict[int, int]:
        reader = self._readers[tier]
        return {
            tp.partition: reader.get_watermark_offsets(tp, timeout=_TIMEOUT_S)[1]
            for tp in self._partitions(tier)
        }

    def committed(self, tier: str) -> dict[int, int]:
        """The group's committed offset per partition (absent: nothing committed)."""
        parts = self._partitions(tier)
        if not parts:
            return {}
        got = self._readers[tier].committed(parts, timeout=_TIMEOUT_S)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
