"""Publishing due runs to the run queue, in batches, with proof of delivery.

The producer is idempotent with acks=all: a retried send cannot duplicate or reorder
a job's messages within a partition, and "delivered" means written to every in-sync
replica. A batch is produced in one go and flushed once (linger.ms small), which is
what lets one scheduler node publish a top-of-hour burst of thousands of runs within
the second. A run whose delivery is not confirmed is named in PublishError, so the
caller does not mark it dispatched; the reaper re-publishes it later.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import KafkaError, Message, Producer

from kit.transport.message import DEFAULT_TOPIC_PREFIX, RunMessage, topic_for

log = logging.getLogger(__name__)


class PublishError(RuntimeError):
    """Some messages of a batch were not confirmed delivered."""

    def __init__(self, failed_run_ids: list[str], total: int, reason: str) -> None:
        super().__init__(f"{len(failed_run_ids)} of {total} run messages not delivered: {reason}")
        self.failed_run_ids = failed_run_ids
        self.total = total


class RunPublisher:
    def __init__(
        self,
        bootstrap: str,
        *,
        topic_prefix: str = DEFAULT_TOPIC_PREFIX,
        linger_ms: int = 5,
        config: dict[str, object] | None = None,
    ) -> None:
        self.topic_prefix = topic_prefix
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": linger_ms,
                "compression.type": "lz4",
                "queue.buffering.max.messages": 500_000,
                **(config or {}),
            }
        )

    def publish(self, messages: Sequence[RunMessage], timeout_s: float = 10.0) -> None:
        """Produce every message (key = job id, topic = its tier) and flush once.

        Raises PublishError naming the runs not confirmed within `timeout_s`; those
        still queued locally are purged, so a failure reported is not sent later.
        """
        if not messages:
            return
        delivered: set[str] = set()
        reasons: list[str] = []

        def outcome(run_id: str) -> object:
            def on_delivery(err: KafkaError | None, _msg: Message) -> None:
                if err is None:
                    delivered.add(run_id)
                elif len(reasons) < 3:
                    reasons.append(err.str())

            return on_delivery

        producer = self._producer
        for m in messages:
            topic = topic_for(m.tier, self.topic_prefix)
            value, key, callback = m.to_bytes(), m.job_id.encode(), outcome(m.run_id)
            while True:
                try:
                    producer.produce(topic, value, key=key, on_delivery=callback)
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: let deliveries drain
        remaining = producer.flush(timeout_s)
        if remaining:
            producer.purge(in_queue=True, in_flight=False)
            producer.poll(0)
            reasons.append(f"{remaining} unconfirmed after {timeout_s} s")
        failed = [m.run_id for m in messages if m.run_id not in delivered]
        if failed:
            log.warning("publish: %d of %d not delivered", len(failed), len(messages))
            raise PublishError(failed, len(messages), "; ".join(reasons) or "unknown")

    def close(self, timeout_s: float = 10.0) -> None:
        self._producer.flush(timeout_s)
