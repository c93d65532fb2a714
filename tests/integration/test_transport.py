"""The run queue against the real Kafka broker of `cronfleet stack up` (no mocks).

Each test has its own topic prefix and group id, so tests never see each other's
messages; its topics are deleted afterwards.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kit.settings import load_settings
from kit.transport import (
    PublishError,
    RunMessage,
    RunPublisher,
    TieredConsumer,
    ensure_topics,
    topic_for,
)
from kit.transport.progress import QueueProgress

pytestmark = pytest.mark.integration

STACK_DOWN = "the local stack is not up: run `cronfleet stack up` before the integration tests"
WAIT_S = 60.0  # a deadline for "eventually", never a speed claim


@pytest.fixture(scope="module")
def bootstrap() -> str:
    bootstrap = load_settings().kafka_bootstrap
    try:
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    except Exception as exc:
        pytest.fail(f"{STACK_DOWN} ({exc})", pytrace=False)
    return bootstrap


@pytest.fixture
def prefix(bootstrap: str) -> Iterator[str]:
    prefix = f"cf.it.{uuid.uuid4().hex[:10]}"
    ensure_topics(bootstrap, 3, prefix=prefix)
    yield prefix
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        future.result()


def _id(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def runs(tier: str, n: int, tag: str = "") -> list[RunMessage]:
    return [
        RunMessage(
            _id(f"{tier}{tag}-{i}"), _id(f"job-{i % 17}"), 1 + i % 3, 1_700_000_000_000 + i, tier
        )
        for i in range(n)
    ]


def drain(
    consumer: TieredConsumer, n: int, batch: int = 500, now_ms: int | None = None
) -> list[RunMessage]:
    """Poll until n messages came back (or the deadline), then once more for extras."""
    got: list[RunMessage] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        got += consumer.poll_batch(batch, 0.5, now_ms)
    got += consumer.poll_batch(batch, 1.0, now_ms)
    return got


def test_ensure_topics_creates_missing_topics_once(bootstrap: str) -> None:
    prefix = f"cf.it.{uuid.uuid4().hex[:10]}"
    created = ensure_topics(bootstrap, 2, prefix=prefix, tiers=("critical", "low"))
    try:
        assert created == [f"{prefix}.critical", f"{prefix}.low", f"{prefix}.dead-letter"]
        assert ensure_topics(bootstrap, 2, prefix=prefix, tiers=("critical", "low")) == []
        meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        assert len(meta[f"{prefix}.critical"].partitions) == 2
        with pytest.raises(ValueError, match="min_insync_replicas"):
            ensure_topics(bootstrap, 2, prefix=prefix, min_insync_replicas=2)
    finally:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.delete_topics(created, operation_timeout=30).values():
            f.result()


def test_publish_round_trips_every_message_exactly_once(bootstrap: str, prefix: str) -> None:
    sent = runs("critical", 500) + runs("high", 1000) + runs("normal", 1500) + runs("low", 1000)
    publisher = RunPublisher(bootstrap, topic_prefix=prefix)
    publisher.publish(sent)
    publisher.close()
    with TieredConsumer(bootstrap, f"g-{prefix}", topic_prefix=prefix) as consumer:
        got = drain(consumer, len(sent))
        consumer.commit()
        assert sorted(m.run_id for m in got) == sorted(m.run_id for m in sent)
        assert {m.run_id: m for m in got} == {m.run_id: m for m in sent}
        assert consumer.lag_by_tier() == {"critical": 0, "high": 0, "normal": 0, "low": 0}
    # Everything was committed: a new consumer of the group gets nothing.
    with TieredConsumer(bootstrap, f"g-{prefix}", topic_prefix=prefix) as again:
        assert again.poll_batch(100, 5.0) == []


def test_publish_returns_the_brokers_append_time_of_each_message(
    bootstrap: str, prefix: str
) -> None:
    """Dispatch lag is measured from the broker's acknowledgement: the run topics are
    created with LogAppendTime, so each message carries the broker's append time."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer

    from kit.transport.publisher import encode

    sent = runs("normal", 20, "acked")
    publisher = RunPublisher(bootstrap, topic_prefix=prefix)
    before = time.time_ns() // 1_000_000
    acked = publisher.publish_encoded([encode(m) for m in sent])
    after = time.time_ns() // 1_000_000
    publisher.close()
    assert set(acked) == {m.run_id for m in sent}
    assert all(before - 1000 <= ms <= after + 1000 for ms in acked.values())  # one clock here
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ts-{prefix}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic_for("normal", prefix)])
        stamps: dict[str, tuple[int, int]] = {}
        deadline = time.monotonic() + WAIT_S
        while len(stamps) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                stamps[RunMessage.from_bytes(msg.value()).run_id] = msg.timestamp()
    finally:
        consumer.close()
    assert {kind for kind, _ in stamps.values()} == {TIMESTAMP_LOG_APPEND_TIME}
    assert {r: ts for r, (_, ts) in stamps.items()} == acked


def test_consumer_reports_lag_per_tier_before_consuming(bootstrap: str, prefix: str) -> None:
    RunPublisher(bootstrap, topic_prefix=prefix).publish(runs("high", 40) + runs("low", 7))
    with TieredConsumer(bootstrap, f"g-{prefix}", topic_prefix=prefix) as consumer:
        lag: dict[str, int] = {}
        deadline = time.monotonic() + WAIT_S
        while lag.get("high") != 40 and time.monotonic() < deadline:
            consumer.poll_batch(0, 0.2)  # joins the groups, returns nothing
            lag = consumer.lag_by_tier()
        assert lag == {"critical": 0, "high": 40, "normal": 0, "low": 7}
        got = drain(consumer, 47)
        assert len(got) == 47
        assert consumer.lag_by_tier()["low"] == 0


@pytest.mark.parametrize("clock", [False, True], ids=["no-clock", "worker-clock"])
def test_critical_backlog_is_served_before_any_low_message(
    bootstrap: str, prefix: str, clock: bool
) -> None:
    """Runs already due (as the worker's clock says, or without one): strictly by tier."""
    publisher = RunPublisher(bootstrap, topic_prefix=prefix)
    publisher.publish(runs("low", 1, "-first"))  # a low run published before any critical
    publisher.publish(runs("low", 300) + runs("normal", 50))
    publisher.publish(runs("critical", 200))
    with TieredConsumer(bootstrap, f"g-{prefix}", topic_prefix=prefix) as consumer:
        got = drain(consumer, 551, batch=25, now_ms=int(time.time() * 1000) if clock else None)
    tiers = [m.tier for m in got]
    assert len(got) == 551
    assert tiers == ["critical"] * 200 + ["normal"] * 50 + ["low"] * 301


def test_critical_published_mid_backlog_preempts_the_rest_of_low(
    bootstrap: str, prefix: str
) -> None:
    publisher = RunPublisher(bootstrap, topic_prefix=prefix)
    publisher.publish(runs("low", 600))
    with TieredConsumer(bootstrap, f"g-{prefix}", topic_prefix=prefix) as consumer:
        got: list[RunMessage] = []
        deadline = time.monotonic() + WAIT_S
        while not got and time.monotonic() < deadline:
            got += consumer.poll_batch(10, 0.5)
        assert got and all(m.tier == "low" for m in got)
        publisher.publish(runs("critical", 30))
        got += drain(consumer, 630 - len(got), batch=10)
    assert len(got) == 630
    critical_at = [i for i, m in enumerate(got) if m.tier == "critical"]
    # All 30 critical runs came back while low backlog remained, not after it.
    assert len(critical_at) == 30
    assert critical_at[-1] < 600
    assert got[-1].tier == "low"


def test_a_low_run_due_now_comes_before_critical_runs_published_for_later(
    bootstrap: str, prefix: str
) -> None:
    """The scheduler publishes runs up to its scan-ahead before their second, so a steady
    critical tier is never drained; served strictly by rank, a worker never read the low
    runs due now (the soak's low tier fell 42,000 runs behind). Served by due time, with
    the worker's clock, they come first."""
    now = int(time.time() * 1000)
    later = [
        RunMessage(_id(f"later-{prefix}-{i}"), _id(f"job-{i % 17}"), 1, now + 8_000, "critical")
        for i in range(200)
    ]
    due = [
        RunMessage(_id(f"due-{prefix}-{i}"), _id(f"job-{i % 17}"), 1, now - 500, "low")
        for i in range(20)
    ]
    RunPublisher(bootstrap, topic_prefix=prefix).publish(later + due)
    with TieredConsumer(bootstrap, f"g-{prefix}", topic_prefix=prefix) as consumer:
        got: list[RunMessage] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < 220 and time.monotonic() < deadline:
            got += consumer.poll_batch(10, 0.5, now_ms=now)
    tiers = [m.tier for m in got]
    assert sorted(m.run_id for m in got) == sorted(m.run_id for m in later + due)
    assert tiers == ["low"] * 20 + ["critical"] * 200


def test_uncommitted_messages_are_redelivered_to_the_group(bootstrap: str, prefix: str) -> None:
    sent = runs("normal", 40)
    RunPublisher(bootstrap, topic_prefix=prefix).publish(sent)
    group = f"g-{prefix}"
    first = TieredConsumer(bootstrap, group, topic_prefix=prefix)
    committed: list[RunMessage] = []
    deadline = time.monotonic() + WAIT_S
    while not committed and time.monotonic() < deadline:
        committed = first.poll_batch(15, 0.5)
    first.commit()  # processed and committed
    returned_only = drain(first, 40 - len(committed))  # returned, never committed
    first.close()  # "crashes" before committing them
    assert len(committed) + len(returned_only) == 40

    with TieredConsumer(bootstrap, group, topic_prefix=prefix) as second:
        redelivered = drain(second, len(returned_only))
    assert sorted(m.run_id for m in redelivered) == sorted(m.run_id for m in returned_only)
    assert not {m.run_id for m in redelivered} & {m.run_id for m in committed}


def test_malformed_messages_are_skipped_counted_and_committed(bootstrap: str, prefix: str) -> None:
    good = runs("high", 3)
    producer = Producer({"bootstrap.servers": bootstrap})
    topic = topic_for("high", prefix)
    bad = [b"not json", b'{"v": 2, "run_id": "x"}', b"[1,2]", b"", b'{"v":1,"run_id":"r"}']
    for value in bad:
        producer.produce(topic, value, key=b"job-0")
    producer.flush(10)
    RunPublisher(bootstrap, topic_prefix=prefix).publish(good)
    group = f"g-{prefix}"
    with TieredConsumer(bootstrap, group, topic_prefix=prefix) as consumer:
        got = drain(consumer, 3)
        consumer.commit()
        assert sorted(m.run_id for m in got) == sorted(m.run_id for m in good)
        assert consumer.malformed == len(bad)
        assert consumer.lag_by_tier()["high"] == 0
    with TieredConsumer(bootstrap, group, topic_prefix=prefix) as again:
        assert again.poll_batch(100, 5.0) == []
        assert again.malformed == 0


def test_publish_to_an_unreachable_broker_names_every_failed_run() -> None:
    publisher = RunPublisher("127.0.0.1:9", config={"message.timeout.ms": 1000})
    batch = runs("normal", 25)
    with pytest.raises(PublishError, match=r"^25 of 25 run messages not delivered") as info:
        publisher.publish(batch, timeout_s=3)
    assert sorted(info.value.failed_run_ids) == sorted(m.run_id for m in batch)


def test_two_consumers_of_one_group_share_and_drain_a_backlog(bootstrap: str) -> None:
    """Regression: a partition paused before a rebalance stayed paused in librdkafka
    after it was assigned again, so a second worker left half the queue unconsumed."""
    import threading

    prefix = f"cf.it.{uuid.uuid4().hex[:10]}"
    ensure_topics(bootstrap, 6, prefix=prefix)
    sent = runs("low", 6000)
    RunPublisher(bootstrap, topic_prefix=prefix).publish(sent)
    got: list[list[RunMessage]] = [[], []]

    def consume(i: int) -> None:
        with TieredConsumer(bootstrap, f"g-{prefix}", topic_prefix=prefix) as consumer:
            deadline = time.monotonic() + 45
            while time.monotonic() < deadline and sum(map(len, got)) < len(sent):
                batch = consumer.poll_batch(max_messages=16, timeout_s=0.5)
                got[i].extend(batch)
                if batch:
                    consumer.commit()

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    received = sorted(m.run_id for m in got[0] + got[1])
    assert len(received) >= len(sent), f"consumed {[len(g) for g in got]} of {len(sent)}"
    assert set(received) == {m.run_id for m in sent}


def _broker_pid() -> int:
    """The pid of `cronfleet stack up`'s broker (its pid file), checked by its command."""
    home = Path(os.environ.get("CRONFLEET_HOME", Path.home() / ".cronfleet")).expanduser()
    pid = int((home / "kafka" / "kafka.pid").read_text().split()[0])
    assert b"kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return pid


def _stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2] == "T"


def test_a_commit_neither_waits_for_a_hung_broker_nor_is_forgotten(
    bootstrap: str, prefix: str
) -> None:
    """A synchronous commit blocked the worker's poll loop for as long as the broker did
    not answer (over three minutes against a SIGSTOPped one, by hand); and a failed commit
    was forgotten. Now commit() returns while the broker is still stopped, and once it
    answers again the group's committed offsets reach every message returned."""
    sent = runs("normal", 12)
    RunPublisher(bootstrap, topic_prefix=prefix).publish(sent)
    group = f"g-{prefix}"
    consumer = TieredConsumer(bootstrap, group, topic_prefix=prefix)
    try:
        assert len(drain(consumer, len(sent))) == len(sent)
        broker = _broker_pid()
        os.kill(broker, signal.SIGSTOP)
        safety = threading.Timer(20.0, os.kill, (broker, signal.SIGCONT))  # whatever happens
        safety.start()
        try:
            consumer.commit()
            returned_while_stopped = _stopped(broker)
        finally:
            os.kill(broker, signal.SIGCONT)
            safety.cancel()
        assert returned_while_stopped
        progress = QueueProgress(bootstrap, group, topic_prefix=prefix, tiers=("normal",))
        try:
            high = progress.high_watermarks("normal")
            deadline = time.monotonic() + WAIT_S
            while progress.committed("normal") != high and time.monotonic() < deadline:
                consumer.poll_batch(10, 0.5)  # serves the commit's outcome; retries it
                consumer.commit()
            assert progress.committed("normal") == high
        finally:
            progress.close()
    finally:
        consumer.close()


def _low_assigned(c: TieredConsumer) -> list[int]:
    """The low tier's partitions, once the group has assigned them (polling until then)."""
    deadline = time.monotonic() + WAIT_S
    while not c.assignment()["low"] and time.monotonic() < deadline:
        c.poll_batch(10, 0.2)
    parts = sorted(c.assignment()["low"])
    assert parts
    return parts


def test_a_partition_paused_behind_the_consumers_back_is_fetched_again(
    bootstrap: str, prefix: str
) -> None:
    """librdkafka can keep a partition paused across a re-assignment while the consumer's
    bookkeeping has it resumed: it was then never fetched again (and every tier below
    waited). Here the disagreement is made by hand: the low tier's partition is paused
    inside librdkafka only; its runs must still come back."""
    with TieredConsumer(bootstrap, f"g-{prefix}", tiers=("low",), topic_prefix=prefix) as c:
        parts = _low_assigned(c)
        topic = topic_for("low", prefix)
        c._tiers[0].consumer.pause([TopicPartition(topic, p) for p in parts])
        sent = runs("low", 5)
        RunPublisher(bootstrap, topic_prefix=prefix).publish(sent)
        got = drain(c, len(sent))
        assert sorted(m.run_id for m in got) == sorted(m.run_id for m in sent)
        assert c.unstalls >= 1


def test_a_partition_whose_position_ran_past_unread_runs_is_read_again(
    bootstrap: str, prefix: str
) -> None:
    """CI's clock-skew drill (2026-12-04): runs on two partitions that went back to their
    owners in a rebalance were never fetched after it, and the stall check saw nothing.
    It measured lag from librdkafka's position, which is blind to a position standing
    past runs never returned: the one way found for it to miss. Here the position is
    moved past five unread runs by hand (a seek behind the consumer's back); they must
    still come back."""
    with TieredConsumer(bootstrap, f"g-{prefix}", tiers=("low",), topic_prefix=prefix) as c:
        parts = _low_assigned(c)
        c.poll_batch(10, 1.0)  # every partition fetching
        topic = topic_for("low", prefix)
        sent = runs("low", 5)
        RunPublisher(bootstrap, topic_prefix=prefix).publish(sent)
        inner = c._tiers[0].consumer
        for p in parts:
            _, high = inner.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            inner.seek(TopicPartition(topic, p, high))
        got = drain(c, len(sent))
        assert sorted(m.run_id for m in got) == sorted(m.run_id for m in sent)
        assert c.unstalls >= 1


def test_a_fresh_assignment_with_a_backlog_is_not_taken_for_a_stall(
    bootstrap: str, prefix: str
) -> None:
    """The stall check counts from the assignment, not from the first empty poll before
    it: a worker whose partitions came long after its first poll (a group forming, a
    rebalance) and brought a backlog fetches it without being "read again" (a storm run's
    log said so, 2026-12-04: harmless, a seek to where the fetch starts anyway, but a
    false alarm in an operator's log). Here the first empty poll is set 10 s back."""
    sent = runs("low", 50)
    RunPublisher(bootstrap, topic_prefix=prefix).publish(sent)
    with TieredConsumer(bootstrap, f"g-{prefix}", tiers=("low",), topic_prefix=prefix) as c:
        c._tiers[0].stalled_since = time.monotonic() - 10.0
        got = drain(c, len(sent))
        assert sorted(m.run_id for m in got) == sorted(m.run_id for m in sent)
        assert c.unstalls == 0


def test_a_stale_start_offset_on_a_higher_tier_does_not_hold_the_lower_one_for_good(
    bootstrap: str, prefix: str
) -> None:
    """The drained check takes a partition's start from the group's committed offset once,
    while nothing has been fetched from it. Should that start be stale (a commit landing
    after it was read), the tier looked "not drained" for good, every tier below was held,
    and the old stall check, asking the broker afresh, found nothing to do: the lower
    tier's runs never started. A stale start is set here by hand; the low runs must come
    back."""
    group = f"g-{prefix}"
    RunPublisher(bootstrap, topic_prefix=prefix).publish(runs("normal", 6))
    with TieredConsumer(bootstrap, group, tiers=("normal",), topic_prefix=prefix) as first:
        assert len(drain(first, 6)) == 6
        first.commit()
        progress = QueueProgress(bootstrap, group, topic_prefix=prefix, tiers=("normal",))
        try:
            high = progress.high_watermarks("normal")

            def committed_all() -> bool:
                done = progress.committed("normal")
                return all(done.get(p, 0) >= h for p, h in high.items())

            deadline = time.monotonic() + WAIT_S
            while not committed_all() and time.monotonic() < deadline:
                first.poll_batch(10, 0.2)  # serves the commit's outcome
            assert committed_all()
        finally:
            progress.close()
    tiers = ("normal", "low")
    with TieredConsumer(bootstrap, group, tiers=tiers, topic_prefix=prefix) as c:
        deadline = time.monotonic() + WAIT_S
        while not all(c.assignment().values()) and time.monotonic() < deadline:
            c.poll_batch(10, 0.2)
        normal = c._tiers[0]
        assert normal.name == "normal" and normal.assigned
        normal.start = {p: 0 for p in normal.assigned}  # behind what the group committed
        sent = runs("low", 5)
        RunPublisher(bootstrap, topic_prefix=prefix).publish(sent)
        got = drain(c, len(sent))
        assert sorted(m.run_id for m in got) == sorted(m.run_id for m in sent)
