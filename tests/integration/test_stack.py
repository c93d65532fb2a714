"""The local stack from `cronfleet stack up` is real: PostgreSQL answers SQL and the
Kafka broker round-trips a message. Run `cronfleet stack up` before pytest; when the
stack is down these tests fail (they never skip), saying so.
"""

from __future__ import annotations

import stat
import subprocess
import sys
import uuid

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kit.settings import load_settings

pytestmark = pytest.mark.integration

STACK_DOWN = "the local stack is not up: run `cronfleet stack up` before the integration tests"


def psycopg_dsn(database_url: str) -> str:
    """SQLAlchemy's `postgresql+psycopg://` URL as a libpq URI psycopg accepts."""
    return database_url.replace("postgresql+psycopg://", "postgresql://", 1)


def test_stack_status_reports_every_service_answering() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "stack", "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{STACK_DOWN}\n{done.stdout}{done.stderr}"
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["postgres", "kafka"]
    assert all(line.endswith("answers") for line in lines), done.stdout


def test_postgres_from_the_stack_answers_select_1() -> None:
    settings = load_settings()
    try:
        conn = psycopg.connect(psycopg_dsn(settings.database_url), connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"{STACK_DOWN} ({settings.database_url}: {exc})")
    with conn:
        row = conn.execute("select 1, current_user, current_database()").fetchone()
    assert row == (1, "cronfleet", "cronfleet")


def test_kafka_from_the_stack_round_trips_a_message() -> None:
    bootstrap = load_settings().kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.list_topics(timeout=10)
    except KafkaException as exc:
        pytest.fail(f"{STACK_DOWN} (kafka {bootstrap}: {exc})")

    topic = f"cf.stack-test.{uuid.uuid4().hex}"
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=30
    )
    key, value = b"job-42", f"run {uuid.uuid4()}".encode()

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    delivered: list[object] = []
    producer.produce(
        topic, key=key, value=value, on_delivery=lambda err, _msg: delivered.append(err)
    )
    assert producer.flush(30) == 0, "message not delivered within 30 s"
    assert delivered == [None]

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cronfleet-stack-test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        message = None
        for _ in range(60):  # bounded: at most 60 polls of 1 s
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        assert message is not None, f"nothing consumed from {topic}"
        assert message.error() is None, message.error()
        assert (message.key(), message.value()) == (key, value)
    finally:
        consumer.close()
        admin.delete_topics([topic])


def test_the_stacks_secrets_are_private_and_not_well_known() -> None:
    """stack.env and the role's password are their owner's alone (0600), the password is
    drawn at random (a well-known one let any local process, a tenant's command among
    them, log in), and `stack status` does not print it (issue 7, item 1)."""
    from sqlalchemy.engine import make_url

    from kit.settings import cronfleet_home, stack_env_file

    for path in (stack_env_file(), cronfleet_home() / "postgres.password"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    url = make_url(load_settings().database_url)
    assert url.password and len(url.password) >= 24
    well_known = url.set(password="cronfleet").render_as_string(hide_password=False)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(psycopg_dsn(well_known), connect_timeout=5)
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "stack", "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert url.password not in done.stdout + done.stderr
