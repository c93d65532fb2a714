"""What the benchmarks that drive one in-process worker share: a scratch database and run
topics of their own on the local stack (made, migrated, dropped at the end), and a
bounded wait."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine, create_engine, text

from kit.settings import Settings, load_settings
from kit.store import migrate
from kit.store.db import engine_for
from kit.transport import RunPublisher, TieredConsumer, ensure_topics


@dataclass
class Scratch:
    settings: Settings
    engine: Engine
    publisher: RunPublisher
    consumer: TieredConsumer
    prefix: str  # the run topics' prefix


@contextmanager
def scratch(tag: str) -> Iterator[Scratch]:
    """A database `cf_bench_<tag>_<random>` and topics `cf.bench.<tag>.<random>.*`, with
    a publisher and a consumer on them; all closed, and the database dropped, on exit."""
    settings = load_settings()
    name = f"cf_bench_{tag}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(settings.database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = settings.database_url.rsplit("/", 1)[0] + "/" + name
    prefix = f"cf.bench.{tag}.{uuid.uuid4().hex[:6]}"
    try:
        migrate.upgrade(url)
        engine = engine_for(url, pool_size=4)
        ensure_topics(settings.kafka_bootstrap, 1, prefix=prefix)
        publisher = RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix)
        consumer = TieredConsumer(settings.kafka_bootstrap, f"g-{prefix}", topic_prefix=prefix)
        try:
            yield Scratch(settings, engine, publisher, consumer, prefix)
        finally:
            consumer.close()
            publisher.close()
            engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def wait(cond: Callable[[], object], timeout_s: float = 120.0, step_s: float = 0.001) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(step_s)
