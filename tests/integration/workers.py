"""A worker run on a thread for the tests that drive one against the real stack."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine

from kit.settings import Settings
from kit.transport import RunPublisher, TieredConsumer
from kit.worker.worker import Worker, task_executor


@contextmanager
def running_worker(
    engine: Engine, settings: Settings, prefix: str, group: str, publisher: RunPublisher
) -> Iterator[Worker]:
    """One worker of 2 slots consuming the test's topics, stopped and closed after."""
    consumer = TieredConsumer(settings.kafka_bootstrap, group, topic_prefix=prefix)
    worker = Worker(engine, consumer, publisher, "w1", 2, 30_000, execute=task_executor())
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop, 5.0), daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        stop.set()
        thread.join(20)
        consumer.close()
