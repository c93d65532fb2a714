"""The wall clock and the publisher of benchmarks/trigger_index.py: the kit's scan run as
a scheduler node runs it (kit.scheduler.node), so that "before its second" means what it
means on a node.

- `WallClock`: second s of the run starts at `base + s` on the wall clock; a scan runs
  at the database time it starts at (T0 + elapsed), and the next one at the next whole
  second after it ends (kit.core.dispatch.next_scan_at_ms), so a scan that overruns
  delays the ones after it.
- `Publishing`: what each scan committed goes to the run queue at once, from a thread of
  its own, in chunks of 5,000 (SchedulerNode._publish_loop), through the kit's
  RunPublisher; each run's commit and acknowledgement times are kept.

Imported by trigger_index.py as a sibling module, like scratch_db.
"""

from __future__ import annotations

import math
import queue
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from confluent_kafka.admin import AdminClient

from kit.core.timeutil import to_epoch_ms
from kit.transport import RunPublisher, ensure_topics
from kit.transport.kafka_client import client_config

PUBLISH_CHUNK = 5000  # kit.scheduler.node.PUBLISH_CHUNK


class WallClock:
    """Run seconds on the wall clock: second 0 is `start_in_s` from now and is the
    database time `t0`."""

    def __init__(self, t0: datetime, start_in_s: float = 1.0) -> None:
        self.t0 = t0
        self.t0_ms = to_epoch_ms(t0)
        self.base = time.time() + start_in_s

    def elapsed_s(self) -> float:
        return time.time() - self.base

    def wait_for(self, second: int) -> None:
        """Sleep until `second` begins (at once when it has)."""
        ahead = self.base + second - time.time()
        if ahead > 0:
            time.sleep(ahead)

    def now(self) -> datetime:
        """The database time of this instant."""
        return self.t0 + timedelta(seconds=self.elapsed_s())

    def next_second(self) -> int:
        """The whole second a node scans next, after now."""
        return math.floor(self.elapsed_s()) + 1

    def wall_of(self, ms: int) -> float:
        """The wall time (epoch s) of a database instant in epoch ms."""
        return self.base + (ms - self.t0_ms) / 1000


@dataclass
class Published:
    """One run a scan committed: its scheduled instant, when the scan's commit returned
    and when the broker acknowledged its message (epoch s; None: not confirmed)."""

    run_id: str
    scheduled_at_ms: int
    committed_s: float
    acked_s: float | None


class Publishing:
    """Each scan's held runs, published at once on a thread of their own."""

    def __init__(self, bootstrap: str) -> None:
        self.prefix = f"cf-bench-ti-{uuid.uuid4().hex[:8]}"
        self.bootstrap = bootstrap
        ensure_topics(bootstrap, 6, prefix=self.prefix)
        self._publisher = RunPublisher(bootstrap, topic_prefix=self.prefix)
        self._queue: queue.SimpleQueue[tuple[Sequence[Any], float] | None] = queue.SimpleQueue()
        self.records: list[Published] = []
        self._thread = threading.Thread(target=self._loop, name="bench-publish", daemon=True)
        self._thread.start()

    def put(self, held: Sequence[Any], committed_s: float) -> None:
        if held:
            self._queue.put((held, committed_s))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            held, committed = item
            for i in range(0, len(held), PUBLISH_CHUNK):
                chunk = held[i : i + PUBLISH_CHUNK]
                try:
                    acked = self._publisher.publish_encoded([r.message for r in chunk]) or {}
                except Exception as exc:  # a failed delivery is reported, not fatal
                    acked = getattr(exc, "acked_ms", {})
                for r in chunk:
                    ms = acked.get(r.run_id)
                    self.records.append(
                        Published(
                            r.run_id,
                            r.scheduled_at_ms,
                            committed,
                            None if ms is None else ms / 1000,
                        )
                    )

    def close(self) -> None:
        """Publish what is queued, then drop the scratch topics."""
        self._queue.put(None)
        self._thread.join(120)
        self._publisher.close()
        admin = AdminClient(client_config(self.bootstrap))
        topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(self.prefix)]
        if topics:
            for future in admin.delete_topics(topics, operation_timeout=30).values():
                future.result()
