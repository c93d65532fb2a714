"""Publishing due runs to the run queue, in batches, with proof of delivery.

The producer is idempotent with acks=all: a retried send cannot duplicate or reorder
a job's messages within a partition, and "delivered" means written to every in-sync
replica. A batch is produced in one go and flushed once (linger.ms small), which is
what lets one scheduler node publish a top-of-hour burst of thousands of runs within
the second. A run whose delivery is not confirmed is named in PublishError; its row is
committed already, and the reaper publishes it again once nobody claimed it within the
unclaimed grace (kit.core.recovery).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message, Producer

from kit.transport.consumer import Rejected
from kit.transport.kafka_client import client_config
from kit.transport.message import (
    DEFAULT_TOPIC_PREFIX,
    MESSAGE_VERSION,
    RunMessage,
    dead_letter_topic,
    topic_for,
)

log = logging.getLogger(__name__)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class PublishError(RuntimeError):
    """Some messages of a batch were not confirmed delivered."""

    def __init__(
        self,
        failed_run_ids: list[str],
        total: int,
        reason: str,
        acked_ms: dict[str, int] | None = None,
    ) -> None:
        super().__init__(f"{len(failed_run_ids)} of {total} run messages not delivered: {reason}")
        self.failed_run_ids = failed_run_ids
        self.total = total
        self.acked_ms = acked_ms or {}  # the ones that were delivered, as publish returns


class EncodedRun(NamedTuple):
    """A RunMessage serialised ahead of its second (the scheduler encodes while it
    scans, so the publish at the second only produces)."""

    run_id: str
    tier: str
    key: bytes
    value: bytes


class Encoded(Protocol):
    """What publish_encoded produces: an EncodedRun, or a scheduler's held run, which
    carries its message's key and value itself."""

    @property
    def run_id(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> bytes: ...


def encode(m: RunMessage) -> EncodedRun:
    """`m.to_bytes()` with the key, built by formatting (about ten times faster than
    json.dumps): a RunMessage holds canonical UUIDs, integers and a tier name, none of
    which needs JSON escaping; a unit test holds the bytes equal."""
    return encode_run(m.run_id, m.job_id, m.attempt, m.scheduled_at_ms, m.tier)


def encode_run(
    run_id: str, job_id: str, attempt: int, scheduled_at_ms: int, tier: str
) -> EncodedRun:
    """`encode` of the message a run's fields make, without a RunMessage in between."""
    return EncodedRun(
        run_id, tier, job_id.encode(), message_value(run_id, job_id, attempt, scheduled_at_ms, tier)
    )


def message_value(run_id: str, job_id: str, attempt: int, scheduled_at_ms: int, tier: str) -> bytes:
    """A run message's bytes from the run's fields. The scheduler encodes every run it
    fires from ids it made or read back from the database (canonical UUIDs) and a tier
    the schema checks: RunMessage's validation would check what is already known."""
    return (
        f'{{"v":{MESSAGE_VERSION},"run_id":"{run_id}","job_id":"{job_id}",'
        f'"attempt":{attempt},"scheduled_at_ms":{scheduled_at_ms},"tier":"{tier}"}}'
    ).encode()


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
                **client_config(bootstrap),
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
        self.publish_encoded([encode(m) for m in messages], timeout_s)

    def publish_encoded(
        self, messages: Sequence[Encoded], timeout_s: float = 10.0
    ) -> dict[str, int]:
        """`publish` for messages encoded beforehand. Returns each delivered run's
        acknowledgement time, epoch ms: the broker's append timestamp (the run topics are
        created with LogAppendTime), or, on a topic still stamped by the producer, the
        wall time at which the acknowledgement arrived. It is what the publish lag measures
        (`cronfleet_dispatch_lag_seconds`; docs/life-of-a-run.md, "Lags")."""
        if not messages:
            return {}
        delivered: dict[str, int] = {}
        reasons: list[str] = []

        def outcome(run_id: str) -> object:
            def on_delivery(err: KafkaError | None, msg: Message) -> None:
                if err is None:
                    kind, ts = msg.timestamp()
                    delivered[run_id] = ts if kind == TIMESTAMP_LOG_APPEND_TIME else wall_ms()
                elif len(reasons) < 3:
                    reasons.append(err.str())

            return on_delivery

        producer = self._producer
        topics = {}
        for m in messages:
            topic = topics.get(m.tier)
            if topic is None:
                topic = topics[m.tier] = topic_for(m.tier, self.topic_prefix)
            callback = outcome(m.run_id)
            while True:
                try:
                    producer.produce(topic, m.value, key=m.key, on_delivery=callback)
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
            raise PublishError(
                failed, len(messages), "; ".join(reasons) or "unknown", acked_ms=delivered
            )
        return delivered

    def publish_rejected(self, rejected: Sequence[Rejected], timeout_s: float = 10.0) -> None:
        """Put messages a worker cannot use on the dead-letter topic, as they came, with
        why and where from in their headers; PublishError unless every one is confirmed
        (the caller then does not commit them, and they come back)."""
        if not rejected:
            return
        topic = dead_letter_topic(self.topic_prefix)
        failures: list[str] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failures.append(err.str())

        for r in rejected:
            headers = [
                ("reason", r.reason.encode()),
                ("topic", r.topic.encode()),
                ("partition", str(r.partition).encode()),
                ("offset", str(r.offset).encode()),
            ]
            self._producer.produce(
                topic, r.value, key=r.key, headers=headers, on_delivery=on_delivery
            )
        remaining = self._producer.flush(timeout_s)
        if remaining or failures:
            reason = "; ".join(failures[:3]) or f"{remaining} unconfirmed after {timeout_s} s"
            raise PublishError([], len(rejected), f"dead-letter topic: {reason}")

    def close(self, timeout_s: float = 10.0) -> None:
        self._producer.flush(timeout_s)
