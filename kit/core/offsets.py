"""The offsets a consumer owes its group: what it returned and has not yet committed.

A commit that fails (the broker away for a moment, a coordinator moving) must not forget
them. librdkafka keeps fetching from its own position, so nothing is redelivered unless
the partition moves; if no message arrives on that partition afterwards, its committed
offset stays behind its high watermark for good, and the reaper, which re-publishes a
lost run only once the group has committed past it (kit.core.recovery), never does. So a
failed commit's offsets are owed again and sent with the next commit, unless the
partition was revoked meanwhile (its new owner reads from the last commit: redelivery).

Commits are asynchronous (a synchronous one blocks the poll loop for as long as the
group's coordinator does not answer: minutes against a broker that hangs), so a commit
can fail after a later one was sent: it is owed again only if no later offset of its
partition has been sent, so a committed offset never goes back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class PendingOffsets:
    def __init__(self) -> None:
        self._next: dict[int, int] = {}  # partition -> next offset to read, not yet sent
        self._sent: dict[int, int] = {}  # partition -> highest offset sent in a commit

    def __bool__(self) -> bool:
        return bool(self._next)

    def returned(self, partition: int, offset: int) -> None:
        """A message at `offset` was handed to the caller."""
        if offset + 1 > self._next.get(partition, -1):
            self._next[partition] = offset + 1

    def take(self, assigned: Iterable[int]) -> dict[int, int]:
        """What to commit now, for the partitions still assigned; the rest is dropped
        (those messages are redelivered to whoever holds them now)."""
        owned = set(assigned)
        out = {p: off for p, off in self._next.items() if p in owned}
        self._next.clear()
        for p, off in out.items():
            self._sent[p] = max(self._sent.get(p, -1), off)
        return out

    def failed(self, offsets: Mapping[int, int]) -> None:
        """A commit of `offsets` failed: owe those no later commit has superseded."""
        for p, off in offsets.items():
            if p in self._sent and off >= self._sent[p] and off > self._next.get(p, -1):
                self._next[p] = off

    def revoked(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            self._next.pop(p, None)
            self._sent.pop(p, None)
