"""Publishing runs the store hands back (a reaper's expired or unclaimed runs, a
worker's released or returned ones) to their queue again.

Here, in the transport, rather than in one service, so the reaper and the worker share
it without one service importing the other; the store's row type is met by shape (a
`RunPointer` of kit.store.claims), so the transport does not import the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from kit.core.timeutil import to_epoch_ms
from kit.transport.message import RunMessage
from kit.transport.publisher import RunPublisher


class Pointer(Protocol):
    """A run to publish: its id, job, attempt, second and priority tier."""

    @property
    def run_id(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def scheduled_at(self) -> datetime: ...
    @property
    def priority(self) -> str: ...


def message_of(pointer: Pointer) -> RunMessage:
    return RunMessage(
        run_id=pointer.run_id,
        job_id=pointer.job_id,
        attempt=pointer.attempt,
        scheduled_at_ms=to_epoch_ms(pointer.scheduled_at),
        tier=pointer.priority,
    )


def publish_pointers(publisher: RunPublisher, pointers: Sequence[Pointer]) -> None:
    if pointers:
        publisher.publish([message_of(p) for p in pointers])
