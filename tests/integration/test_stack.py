"""The local stack from `cronfleet stack up` is real: PostgreSQL answers SQL and the
Kafka broker round-trips a message. Run `cronfleet stack up` before pytest; when the
stack is down these tests fail (they never skip), saying so.
"""

from __future__ import annotations

import stat
import subprocess
import sys
import uuid
from pathlib import Path

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
    assert [line.split()[0] for line in lines] == ["postgres", "kafka", "kafka-tls"]
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


def test_the_stack_home_and_its_files_are_the_owners_alone() -> None:
    """A tenant's command runs as another user on this host: the stack's home is 0700
    (0710 with the `postgres` group where PostgreSQL runs as that user: it may pass, not
    list), nothing under it is open to group or others (but that passage), and the
    servers run under umask 077, so what they write next is private too. Holds once the
    stack was started by this code (`cronfleet stack up` tightens what an older one left;
    the servers' umask is set when they start)."""
    import grp
    import os

    from kit.settings import cronfleet_home
    from kit.stack.kafka.broker import Broker
    from kit.stack.postgres import Postgres

    home = cronfleet_home()
    st = home.stat()
    postgres = grp.getgrnam("postgres").gr_gid if os.geteuid() == 0 else None
    if postgres is None:
        assert stat.S_IMODE(st.st_mode) == 0o700
    else:
        assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o710, postgres)
    for name, pid in (("kafka", Broker.default().pid()), ("postgres", Postgres.default().pid())):
        assert pid is not None, STACK_DOWN
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        umask = [ln for ln in status if ln.startswith("Umask:")]
        assert umask == ["Umask:\t0077"], f"{name} (pid {pid}) runs with {umask}"
    open_ = []
    for root, dirs, files in os.walk(home):
        for entry in (*dirs, *files):
            path = os.path.join(root, entry)
            st = os.lstat(path)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                continue  # symlinks, the server's socket (in a 0700 directory)
            passage = 0o010 if stat.S_ISDIR(st.st_mode) and st.st_gid == postgres else 0
            if stat.S_IMODE(st.st_mode) & 0o077 & ~passage:
                open_.append(f"{oct(stat.S_IMODE(st.st_mode))} {path}")
    assert not open_, f"{len(open_)} entries open to group or others, e.g. {open_[:5]}"


def test_stack_up_with_shards_runs_a_cluster_each_and_db_upgrade_migrates_them(
    tmp_path: Path,
) -> None:
    """`stack up --shards 2`: two PostgreSQL clusters of their own (data, port, log),
    stack.env naming the second in CRONFLEET_SHARD_URLS, `db upgrade` migrating both,
    `shards check` content, and `stack down` stopping both. Its own CRONFLEET_HOME: the
    shared stack is left alone."""
    import os

    env = {**os.environ, "CRONFLEET_HOME": str(tmp_path / "home")}
    env.pop("CRONFLEET_DATABASE_URL", None)
    env.pop("CRONFLEET_SHARD_URLS", None)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kit.cli", *args],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )

    try:
        up = cli("stack", "up", "--only", "postgres", "--shards", "2")
        assert up.returncode == 0, up.stderr
        settings = dict(
            line.split("=", 1) for line in up.stdout.splitlines() if line.startswith("CRONFLEET_")
        )
        assert settings["CRONFLEET_SHARD_URLS"].startswith("shard1=postgresql+psycopg://")
        status = cli("stack", "status", "--only", "postgres")
        lines = status.stdout.splitlines()
        assert [line.split()[0] for line in lines] == ["postgres", "postgres-shard1"]
        assert all(line.endswith("answers") for line in lines), status.stdout
        ports = {line.split()[1].rsplit(":", 1)[1] for line in lines}
        assert len(ports) == 2  # two servers, not two databases of one
        assert cli("shards", "check").returncode == 1  # neither migrated yet
        upgraded = cli("db", "upgrade")
        assert upgraded.returncode == 0, upgraded.stderr
        assert "shard home" in upgraded.stdout and "shard shard1" in upgraded.stdout
        check = cli("shards", "check")
        assert check.returncode == 0, check.stdout + check.stderr
        # `up` without --shards keeps the count the last one set
        again = cli("stack", "up", "--only", "postgres")
        assert "CRONFLEET_SHARD_URLS=shard1=" in again.stdout
    finally:
        down = cli("stack", "down", "--only", "postgres")
    assert down.returncode == 0, down.stderr
    assert "postgres-shard1: stopping" in down.stderr and "postgres: stopping" in down.stderr
    assert cli("stack", "status", "--only", "postgres").returncode == 1
