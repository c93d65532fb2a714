"""Consuming the run queue: runs due now before runs due later, the highest tier first.

Design: one Kafka consumer per tier (group `<group_id>.<tier>`), polled in rank order
from one thread. Each tier's next message is fetched and held in a local buffer (its
partitions then paused, so librdkafka fetches no more of it), and `poll_batch` serves
the tier whose next run is due soonest, every run already due counting as due now and
the higher tier winning within a second (kit.core.dispatch.tier_to_serve). A tier whose
next message is not here yet but which is not *known to be drained* (every partition
assigned to this consumer has a known high watermark and the next offset to read is at
it) counts as due now: while a higher tier's state is unknown (no assignment yet, no
watermark yet, a fetch in flight), every lower tier waits. So a backlog of due runs
comes back highest tier first, and a steady higher tier whose runs are published ahead
of their second (the scheduler's scan-ahead) no longer holds back a lower tier's runs
that are due now. Without a clock (`now_ms` None) the order is strictly by rank.

Why not one consumer subscribed to every tier topic, pausing lower partitions? Its
`consume()` hands back whatever fetch responses arrived, mixed across tiers, so
strict order needs seeks back on every mixed batch, and a lower tier would be served
whenever a higher fetch is merely slow. With one consumer per tier each `consume()`
returns one tier only, so "critical before low" is a property of the loop order plus
the due-time rule, which the integration tests can show: with a due backlog in both,
every critical message comes back before any low one, even a low one published first,
and a low run due now comes back before critical runs due seconds later.

The known limit: "drained" uses the watermark cached from the last fetch response,
so a message produced to a higher tier less than one fetch round trip ago may let a
lower tier be served once more; it is then served on the next poll.

Group membership: a consumer that dies without leaving (SIGKILL, a lost host) holds its
partitions until its session times out, and a member joining meanwhile (its restarted
self, say) makes the whole group wait for that timeout: an eager rebalance stops every
member until all known ones rejoin or expire. librdkafka's default session (45 s) made
one killed worker stop every worker's consumption for about that long (found by the
chaos drill `worker-kill`); the session here is `session_timeout_ms` (10 s by
default, `CRONFLEET_WORKER_SESSION_TIMEOUT_MS`), beaten five times per session by
librdkafka's own thread, whatever the poll loop is doing.

Static membership (`instance_id`, a worker's stable name): each tier's consumer joins
with `group.instance.id` = `<instance_id>.<tier>`. A member that restarts within its
session rejoins under the same id and gets its partitions back with no rebalance, so
the other workers never stop: with dynamic members each restart (a new member id) made
the whole group wait for the dead member's session, and a worker killed and restarted
every few seconds (the chaos drill `worker-kill`, 100 cycles) kept the group stopped
long enough that runs started up to ten minutes late. The cost: a static member that
stops for good (scale-down) leaves its partitions unfetched until its session ends,
since static members do not leave the group on close. Two live members with one id
fence each other: the older one's consumer fails with a fatal error, which is raised
(`ConsumerFenced`), never swallowed.

Offsets: auto-commit is off. `commit()` commits exactly what `poll_batch` returned,
malformed messages included: those are handed out by `take_rejected()` for the caller
to put on the dead-letter topic before it commits, so a poison message is neither
redelivered forever nor lost. What was returned but not committed is redelivered to the
group: at-least-once. A commit that fails is sent again with the next one
(kit.core.offsets). Not thread-safe: one thread polls and commits.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_STORED,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from kit.core.dispatch import PRIORITY_TIERS, tier_rank, tier_to_serve
from kit.core.offsets import PendingOffsets
from kit.transport.kafka_client import client_config
from kit.transport.message import DEFAULT_TOPIC_PREFIX, MessageError, RunMessage, topic_for

log = logging.getLogger(__name__)

_IDLE_WAIT_S = 0.05  # longest block on one tier while nothing is ready
DEFAULT_SESSION_TIMEOUT_MS = 10_000
_QUERY_TIMEOUT_S = 5.0
_STALL_S = 3.0  # a served tier lagging and fetching nothing this long is resumed
_Rebalance = Callable[[Consumer, list[TopicPartition]], None]


class ConsumerFenced(RuntimeError):
    """The broker fenced this consumer (another member joined with its static id, or
    another fatal error): it will never fetch again, so the worker must stop."""


@dataclass(frozen=True)
class Rejected:
    """A message on a run topic that is not a RunMessage this reader understands."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str


@dataclass
class _Tier:
    name: str
    topic: str
    consumer: Consumer = field(init=False)
    assigned: set[int] | None = None  # None until the group has answered
    paused: set[int] = field(default_factory=set)
    buffer: deque[Message] = field(default_factory=deque)
    start: dict[int, int] = field(default_factory=dict)  # first offset to read, if none read
    owed: PendingOffsets = field(default_factory=PendingOffsets)  # returned, not committed
    stalled_since: float | None = None  # served, lagging, fetching nothing since (monotonic)
    read_to: dict[int, int] = field(default_factory=dict)  # next offset after what was read
    commit_failures: int = 0  # in a row


class TieredConsumer:
    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        tiers: Sequence[str] = PRIORITY_TIERS,
        *,
        topic_prefix: str = DEFAULT_TOPIC_PREFIX,
        config: dict[str, object] | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        instance_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.malformed = 0  # messages skipped because they were not a RunMessage
        self.rebalances = 0  # assignments and revocations seen, every tier
        self.unstalls = 0  # stalled tiers whose partitions were resumed (_stalled)
        self._rejected: list[Rejected] = []
        self._tiers: list[_Tier] = []
        for name in sorted(tiers, key=tier_rank):
            tier = _Tier(name, topic_for(name, topic_prefix))
            consumer = Consumer(
                {
                    **client_config(bootstrap),
                    "on_commit": self._on_commit(tier),
                    "group.id": f"{group_id}.{name}",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                    # Short fetch long-polls: a resumed tier fetches again sooner, and the
                    # cached watermarks behind the drained check stay fresh.
                    "fetch.wait.max.ms": 100,
                    "session.timeout.ms": session_timeout_ms,
                    "heartbeat.interval.ms": max(100, session_timeout_ms // 5),
                    **({"group.instance.id": f"{instance_id}.{name}"} if instance_id else {}),
                    **(config or {}),
                }
            )
            tier.consumer = consumer
            consumer.subscribe(
                [tier.topic],
                on_assign=self._on_assign(tier),
                on_revoke=self._on_revoke(tier),
                on_lost=self._on_revoke(tier),
            )
            self._tiers.append(tier)

    # -- public -------------------------------------------------------------------------

    def poll_batch(
        self, max_messages: int = 500, timeout_s: float = 1.0, now_ms: int | None = None
    ) -> list[RunMessage]:
        """Up to `max_messages` runs, all of one tier: the one whose next run is due
        soonest by `now_ms` (the highest within a second, kit.core.dispatch.tier_to_serve),
        or with `now_ms` None the highest tier that has any; [] on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            found, blocker = self._poll_once(max_messages, now_ms)
            if found:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            # Block briefly on the tier expected to produce next (or the top one).
            tier = blocker or self._tiers[0]
            fetched = tier.consumer.consume(max_messages, min(remaining, _IDLE_WAIT_S))
            tier.buffer.extend(_read(tier, fetched))

    def take_rejected(self) -> list[Rejected]:
        """The malformed messages polled since the last call (their offsets are in the
        next commit: forward them before committing)."""
        out, self._rejected = self._rejected, []
        return out

    def commit(self) -> None:
        """Commit everything returned so far. A failed commit is tried again with the
        next one (kit.core.offsets: why it must not be forgotten); its messages are
        redelivered only if their partition moves to another member meanwhile."""
        for tier in self._tiers:
            if not tier.owed:
                continue
            offsets = tier.owed.take(tier.assigned or ())
            if not offsets:
                continue
            try:
                tier.consumer.commit(
                    offsets=[TopicPartition(tier.topic, p, off) for p, off in offsets.items()],
                    asynchronous=True,  # the outcome arrives in _on_commit, on a later poll
                )
            except KafkaException as exc:  # refused at once (no coordinator known, ...)
                self._commit_failed(tier, offsets, exc)

    def _commit_failed(self, tier: _Tier, offsets: dict[int, int], why: object) -> None:
        tier.owed.failed(offsets)
        tier.commit_failures += 1
        if tier.commit_failures == 1:  # once a streak: tried again with every commit
            log.warning("commit %s failed (tried again with the next): %s", tier.name, why)

    def _on_commit(self, tier: _Tier) -> Callable[[KafkaError | None, list[TopicPartition]], None]:
        def on_commit(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
            failed = {
                tp.partition: tp.offset
                for tp in partitions
                if (err is not None or tp.error is not None) and tp.offset >= 0
            }
            if failed:
                self._commit_failed(tier, failed, err or partitions[0].error)
            elif tier.commit_failures:
                log.info("commit %s done after %d failures", tier.name, tier.commit_failures)
                tier.commit_failures = 0

        return on_commit

    def assignment(self) -> dict[str, set[int]]:
        """The partitions of each tier assigned to this consumer now (empty: none yet)."""
        return {tier.name: set(tier.assigned or ()) for tier in self._tiers}

    def lag_by_tier(self) -> dict[str, int]:
        """Messages not yet returned, per tier, on the partitions assigned to this consumer
        (high watermark - next offset to read, plus those held locally)."""
        out: dict[str, int] = {}
        for tier in self._tiers:
            total = len(tier.buffer)
            for p in sorted(tier.assigned or ()):
                total += self._lag(tier, p) or 0
            out[tier.name] = total
        return out

    def describe(self) -> str:
        """This consumer's view of each tier in one line, for the reader of a stuck
        worker's log (`kill -USR2 PID`): per assigned partition how far it was read, and
        librdkafka's position and cached high watermark beside it."""
        out = []
        for tier in self._tiers:
            rows = []
            for p in sorted(tier.assigned or ()):
                tp = TopicPartition(tier.topic, p)
                try:
                    pos: int | str = tier.consumer.position([tp])[0].offset
                    hi: int | str = tier.consumer.get_watermark_offsets(tp, cached=True)[1]
                except KafkaException as exc:
                    pos = hi = f"unknown ({exc})"
                held = " paused" if p in tier.paused else ""
                rows.append(f"{p}: read to {tier.read_to.get(p)}, position {pos}, high {hi}{held}")
            where = "; ".join(rows) if tier.assigned is not None else "no assignment yet"
            out.append(f"{tier.name} [{where}] buffered {len(tier.buffer)}")
        return " | ".join(out) + f" | unstalls {self.unstalls}, rebalances {self.rebalances}"

    def close(self) -> None:
        for tier in self._tiers:
            tier.consumer.close()

    def __enter__(self) -> TieredConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop -----------------------------------------------------------------------

    def _poll_once(
        self, max_messages: int, now_ms: int | None
    ) -> tuple[list[RunMessage], _Tier | None]:
        heads = [self._head(tier, max_messages) for tier in self._tiers]
        pick = tier_to_serve(heads, now_ms)
        found: list[RunMessage] = []
        blocker: _Tier | None = None
        for rank, tier in enumerate(self._tiers):
            if rank != pick:
                if tier.buffer:  # its next run is known: nothing more fetched until served
                    self._hold(tier)
                    tier.stalled_since = None  # held on purpose
                else:  # fetching and nothing came: stalled, if the broker has more
                    self._stalled(tier)
                continue
            self._release(tier)
            if tier.buffer:  # its next run is known: served
                found = self._decode(tier, self._take(tier, max_messages))
                tier.stalled_since = None
            else:  # not known yet: poll_batch waits on it, then the choice is made again
                blocker = tier
                self._stalled(tier)
        return found, blocker

    def _head(self, tier: _Tier, max_messages: int) -> int | None:
        """The due time (ms) of the tier's next message, fetched if none is held here; 0
        when it has messages not fetched yet (they may be due now), None when it has none.
        A malformed head counts as due now: it is served, and so rejected, at once."""
        if not tier.buffer:
            self._release(tier)
            # at least one: a consume of none serves no rebalance, so a tier would never
            # be assigned while the caller asks for nothing (a worker at its budget)
            fetched = tier.consumer.consume(max(1, max_messages), 0)
            tier.buffer.extend(_read(tier, fetched))
        if not tier.buffer:
            return None if self._drained(tier) else 0
        try:
            return RunMessage.from_bytes(tier.buffer[0].value()).scheduled_at_ms
        except MessageError:
            return 0

    def _stalled(self, tier: _Tier) -> None:
        """A tier not held that fetched nothing for `_STALL_S` while the broker has
        messages past what this consumer read: read them again from where it stopped
        (seek, resume). "Where it stopped" is this consumer's own record of what it read
        since the partition was assigned, else the group's committed offset, never
        librdkafka's position: that can run ahead of what was ever returned.

        CI's clock-skew drill twice left runs on a partition unfetched for good, each time
        a partition its owner got back in a rebalance: the likeliest reading the first
        time (2026-12-03), librdkafka kept it paused while this consumer's bookkeeping had
        it resumed; the second (2026-12-04) came after the check that resumed such
        partitions, which measured lag from librdkafka's position and is blind to a
        position standing past messages never returned. Neither cause was reproduced.
        The runs were never lost (the group never committed past them), but never started.
        The drained check's cached start offsets are dropped too: one taken before a late
        commit landed would keep a tier "not drained", and every tier below it held, for
        good.
        """
        now = time.monotonic()
        if tier.stalled_since is None:
            tier.stalled_since = now
            return
        if now - tier.stalled_since < _STALL_S or not tier.assigned:
            return
        tier.stalled_since = now
        tier.start.clear()  # the drained check asks the group's committed offsets afresh
        behind = self._behind(tier)
        if not behind:
            return
        unplaced: list[int] = []
        for p, offset in sorted(behind.items()):
            try:
                tier.consumer.seek(TopicPartition(tier.topic, p, offset))
            except KafkaException as exc:  # no fetch position: placed below
                log.debug("seek %s[%d] to %d: %s", tier.topic, p, offset, exc)
                unplaced.append(p)
        if unplaced:
            self._place(tier, {p: behind[p] for p in unplaced})
        tier.consumer.resume([TopicPartition(tier.topic, p) for p in sorted(behind)])
        self.unstalls += 1
        log.warning(
            "%s fetched nothing in %.0f s with messages unread: reading again from %s",
            tier.topic,
            _STALL_S,
            dict(sorted(behind.items())),
        )

    def _place(self, tier: _Tier, offsets: dict[int, int]) -> None:
        """Give partitions that have no fetch position one, by assigning the tier's
        partitions again with those offsets (the others where they stand). librdkafka
        never starts a partition whose committed offset it failed to fetch after an
        assignment ("Failed to fetch committed offsets ...: Not coordinator", right after
        the broker came back from a stall longer than the session), and a seek on it is
        refused: found by the chaos drill `broker-stall`, whose runs on such a partition
        were never started."""
        assigned = sorted(tier.assigned or ())
        placed = [
            TopicPartition(tier.topic, p, offsets.get(p, tier.read_to.get(p, OFFSET_STORED)))
            for p in assigned
        ]
        try:
            tier.consumer.assign(placed)
        except KafkaException as exc:  # the group is rebalancing: tried again next stall
            log.info("placing %s %s: %s", tier.topic, dict(sorted(offsets.items())), exc)
            return
        tier.paused -= set(offsets)
        log.warning(
            "%s: partitions %s had no fetch position: placed at %s",
            tier.topic,
            sorted(offsets),
            dict(sorted(offsets.items())),
        )

    def _behind(self, tier: _Tier) -> dict[int, int]:
        """The assigned partitions whose high watermark (asked of the broker) is past the
        next offset to read, with that offset; {} when the broker does not answer."""
        parts = sorted(tier.assigned or ())
        start = {p: tier.read_to[p] for p in parts if p in tier.read_to}
        try:
            unread = [TopicPartition(tier.topic, p) for p in parts if p not in start]
            if unread:
                for tp in tier.consumer.committed(unread, timeout=_QUERY_TIMEOUT_S):
                    start[tp.partition] = tp.offset  # < 0: the group committed nothing
            out: dict[int, int] = {}
            for p in parts:
                lo, hi = tier.consumer.get_watermark_offsets(
                    TopicPartition(tier.topic, p), timeout=_QUERY_TIMEOUT_S
                )
                first = start[p] if start.get(p, -1) >= 0 else lo  # auto.offset.reset=earliest
                if hi > first:
                    out[p] = first
        except KafkaException as exc:
            log.debug("what %s has unread is unknown: %s", tier.topic, exc)
            return {}
        return out

    def _take(self, tier: _Tier, n: int) -> list[Message]:
        out: list[Message] = []
        while tier.buffer and len(out) < n:
            out.append(tier.buffer.popleft())
        if len(out) < n:
            out += _read(tier, tier.consumer.consume(n - len(out), 0))
        return out

    def _decode(self, tier: _Tier, raw: list[Message]) -> list[RunMessage]:
        runs: list[RunMessage] = []
        for msg in raw:
            p, offset = msg.partition(), msg.offset()
            tier.owed.returned(p, offset)
            try:
                runs.append(RunMessage.from_bytes(msg.value()))
            except MessageError as exc:
                self.malformed += 1
                log.warning("rejecting malformed message %s[%d]@%d: %s", tier.topic, p, offset, exc)
                self._rejected.append(
                    Rejected(tier.topic, p, offset, msg.key(), msg.value(), str(exc))
                )
        return runs

    def _hold(self, tier: _Tier) -> None:
        """A lower tier waits: stop fetching it, keep its membership alive."""
        if tier.assigned:
            fresh = tier.assigned - tier.paused
            if fresh:
                tier.consumer.pause([TopicPartition(tier.topic, p) for p in sorted(fresh)])
                tier.paused |= fresh
        tier.buffer.extend(_read(tier, tier.consumer.consume(1000, 0)))

    def _release(self, tier: _Tier) -> None:
        if tier.paused:
            tier.consumer.resume([TopicPartition(tier.topic, p) for p in sorted(tier.paused)])
            tier.paused.clear()

    def _drained(self, tier: _Tier) -> bool:
        if tier.buffer or tier.assigned is None:
            return False
        for p in tier.assigned:
            lag = self._lag(tier, p)
            if lag is None or lag > 0:
                return False
        return True

    def _lag(self, tier: _Tier, p: int) -> int | None:
        """High watermark - next offset to read; None when not known yet."""
        consumer = tier.consumer
        tp = TopicPartition(tier.topic, p)
        try:
            lo, hi = consumer.get_watermark_offsets(tp, cached=True)
            if hi < 0:
                lo, hi = consumer.get_watermark_offsets(tp, timeout=_QUERY_TIMEOUT_S)
            pos = consumer.position([tp])[0].offset
            if pos < 0:
                if p not in tier.start:
                    committed = consumer.committed([tp], timeout=_QUERY_TIMEOUT_S)[0].offset
                    if committed < 0:  # no commit yet: auto.offset.reset=earliest
                        if lo < 0:
                            lo, _ = consumer.get_watermark_offsets(tp, timeout=_QUERY_TIMEOUT_S)
                        committed = lo
                    tier.start[p] = committed
                pos = tier.start[p]
        except KafkaException as exc:
            log.debug("lag of %s[%d] unknown: %s", tier.topic, p, exc)
            return None
        return max(0, hi - pos)

    # -- rebalance callbacks ------------------------------------------------------------

    def _on_assign(self, tier: _Tier) -> _Rebalance:
        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            consumer.assign(partitions)
            # librdkafka can keep a partition paused across a re-assignment while our
            # bookkeeping forgets it: resume, so no partition is left unfetched for good.
            consumer.resume(partitions)
            if tier.assigned is None:
                tier.assigned = set()
            tier.assigned |= {tp.partition for tp in partitions}
            tier.paused -= {tp.partition for tp in partitions}
            for tp in partitions:  # read afresh from the group's committed offset
                tier.read_to.pop(tp.partition, None)
            tier.stalled_since = None  # a stall counts from here, not from polls before
            self.rebalances += 1
            log.info("%s assigned %s", tier.topic, sorted(tier.assigned))

        return on_assign

    def _on_revoke(self, tier: _Tier) -> _Rebalance:
        def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            gone = {tp.partition for tp in partitions}
            self.rebalances += 1
            if tier.assigned is not None:
                tier.assigned -= gone
            tier.paused -= gone
            tier.buffer = deque(m for m in tier.buffer if m.partition() not in gone)
            for p in gone:
                tier.start.pop(p, None)
                tier.read_to.pop(p, None)
            tier.owed.revoked(gone)

        return on_revoke


def _read(tier: _Tier, messages: list[Message]) -> list[Message]:
    """`_ok`, noting how far this consumer has read each partition."""
    out = _ok(messages)
    for m in out:
        p = m.partition()
        tier.read_to[p] = max(tier.read_to.get(p, 0), m.offset() + 1)
    return out


def _ok(messages: list[Message]) -> list[Message]:
    """Drop error events (logged); keep messages. A fatal one is raised: the consumer
    is dead (fenced by a member with its static id) and polling it again fetches nothing."""
    out = []
    for m in messages:
        err = m.error()
        if err is None:
            out.append(m)
        elif err.fatal() or err.code() == KafkaError._FATAL:
            raise ConsumerFenced(
                f"consumer of {m.topic()} failed for good: {err.str()} (is another worker "
                "running with the same --worker-id? worker ids must be unique)"
            )
        elif err.code() != KafkaError._PARTITION_EOF:
            log.warning("consumer event on %s: %s", m.topic(), err.str())
    return out
