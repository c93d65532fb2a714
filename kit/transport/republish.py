"""Publishing runs the store hands back (a reaper's expired or unclaimed runs, a
worker's released or returned ones) to their queue again.

Here, in the transport, rather than in one service, so the reaper and the worker share
it without one service importing the other; the store's row type is met by shape (a
`RunPointer` of kit.store.claims is a `QueuedRun`), so the transport does not import
the store.
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.transport.message import QueuedRun, RunMessage
from kit.transport.publisher import RunPublisher


def publish_pointers(publisher: RunPublisher, pointers: Sequence[QueuedRun]) -> None:
    if pointers:
        publisher.publish([RunMessage.of(p) for p in pointers])
