"""Integration fixtures: the real PostgreSQL of `cronfleet stack up`, a fresh database per
test cloned from a template migrated once per session, an API client bound to it and a
token factory. Nothing is mocked.

The template and test databases carry this process's pid in their names, so concurrent
sessions do not collide; ones left behind by a dead session are dropped at start.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url

from kit.api.app import create_app
from kit.settings import Settings, load_settings
from kit.store import migrate
from kit.store.db import engine_for
from kit.store.schema import metadata
from kit.store.tokens import token_create
from kit.tasks.policy import local_policy_toml
from kit.tasks.tenant_policy import local_tenants_toml
from tests.integration.console_client import login
from tests.integration.leaks import LeakWatch

if TYPE_CHECKING:
    from kit.transport import RunPublisher

STACK_DOWN = "the local stack is not up: run `cronfleet stack up` before the integration tests"
_PREFIX = "cf_it_"
_OWN = re.compile(rf"^{_PREFIX}(\d+)_")
_counter = itertools.count()

TokenFactory = Callable[..., str]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _url_for(base_url: str, database: str) -> str:
    return make_url(base_url).set(database=database).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def admin_engine() -> Iterator[Engine]:
    """Autocommit connection to the stack's own database, for CREATE/DROP DATABASE."""
    engine = create_engine(load_settings().database_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        pytest.fail(f"{STACK_DOWN} ({type(exc).__name__}: {exc})", pytrace=False)
    with engine.connect() as conn:
        names = conn.execute(
            text("SELECT datname FROM pg_database WHERE datname LIKE :p"), {"p": _PREFIX + "%"}
        ).scalars()
        for name in list(names):
            match = _OWN.match(name)
            if match and not _pid_alive(int(match.group(1))):
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def template_db(admin_engine: Engine) -> Iterator[str]:
    """Migrated once per session; every test database is a copy of it."""
    name = f"{_PREFIX}{os.getpid()}_template"
    with admin_engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    migrate.upgrade(_url_for(admin_engine.url.render_as_string(hide_password=False), name))
    yield name
    with admin_engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _own_database(admin_engine: Engine, template: str | None) -> Iterator[str]:
    """A database of this test's alone (a copy of `template`, else empty), dropped after."""
    name = f"{_PREFIX}{os.getpid()}_{next(_counter)}"
    copy = f' TEMPLATE "{template}"' if template else ""
    with admin_engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"{copy}'))
    yield _url_for(admin_engine.url.render_as_string(hide_password=False), name)
    with admin_engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def db_url(admin_engine: Engine, template_db: str) -> Iterator[str]:
    """A fresh, migrated, empty database for this test alone."""
    yield from _own_database(admin_engine, template_db)


@pytest.fixture
def empty_db_url(admin_engine: Engine) -> Iterator[str]:
    """A database never migrated (a shard just added to the settings), this test's alone."""
    yield from _own_database(admin_engine, None)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = engine_for(db_url, pool_size=4)
    yield engine
    engine.dispose()


# The operator's task policy of the tests' API and workers: tenant acme may run /bin/echo
# and /bin/sh (with a token that has the `command` scope), as `nobody` where the tests run
# as root (what its commands write goes to the `shared_dir` fixture); other tenants run no
# command.
TEST_TASK_POLICY = local_policy_toml("acme", ["/bin/echo", "/bin/sh"])


@pytest.fixture(scope="session")
def task_policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "tasks.toml"
    path.write_text(TEST_TASK_POLICY)
    return path


# The operator's tenant policy of the tests' API and workers: tenant acme may use every
# priority tier (`critical` is the operator's to grant); other tenants get the defaults.
TEST_TENANT_POLICY = local_tenants_toml(["acme"])


@pytest.fixture(scope="session")
def tenant_policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "tenants.toml"
    path.write_text(TEST_TENANT_POLICY)
    return path


@pytest.fixture
def settings(db_url: str, task_policy_file: Path, tenant_policy_file: Path) -> Settings:
    return load_settings(
        database_url=db_url,
        task_policy_file=str(task_policy_file),
        tenant_policy_file=str(tenant_policy_file),
    )


@pytest.fixture
def client(settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings, engine)) as test_client:
        yield test_client


@pytest.fixture
def make_token(engine: Engine) -> TokenFactory:
    """make_token("acme", scopes=("read",)) -> a plaintext bearer token."""

    def make(tenant: str = "acme", scopes: Sequence[str] = ("read", "write")) -> str:
        return token_create(engine, tenant, scopes).token

    return make


@pytest.fixture
def auth(make_token: TokenFactory) -> Callable[..., dict[str, str]]:
    """auth("acme", scopes=...) -> request headers carrying a new token."""

    def headers(tenant: str = "acme", scopes: Sequence[str] = ("read", "write")) -> dict[str, str]:
        return {"Authorization": f"Bearer {make_token(tenant, scopes)}"}

    return headers


@pytest.fixture
def row_counts(engine: Engine) -> Callable[[], dict[str, int]]:
    """Rows per table, to prove a refused request wrote nothing."""

    def counts() -> dict[str, int]:
        with engine.connect() as conn:
            return {
                name: conn.execute(select(func.count()).select_from(table)).scalar_one()
                for name, table in metadata.tables.items()
            }

    return counts


@pytest.fixture
def prefix(settings: Settings) -> Iterator[str]:
    """Run topics of this test alone (1 partition per tier), deleted at its end."""
    from confluent_kafka.admin import AdminClient

    from kit.transport import ensure_topics

    prefix = f"cf.wk.{uuid.uuid4().hex[:10]}"
    ensure_topics(settings.kafka_bootstrap, 1, prefix=prefix)
    yield prefix
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
    if topics:
        for future in admin.delete_topics(topics).values():
            future.result(timeout=10)


@pytest.fixture
def publisher(settings: Settings, prefix: str) -> Iterator[RunPublisher]:
    from kit.transport import RunPublisher

    pub = RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix)
    yield pub
    pub.close()


# Test topics all start with "cf." or "cf_" (the kit's own are "cronfleet.runs.<tier>");
# a benchmark's ("cf_bench...", "cf.bench...") are never the tests' to delete.
_TEST_TOPIC = re.compile(r"^cf[._](?!bench)")


# One file per running pytest session (named by its pid), so a sweep can tell it is not alone.
_SESSIONS = Path(tempfile.gettempdir()) / "cronfleet-pytest-sessions"


def _topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=10).topics)


@pytest.fixture(scope="session", autouse=True)
def _no_planted_secret_in_any_log() -> Iterator[LeakWatch]:
    """Every record logged in the session, INFO and up, is searched for the secrets the
    tests planted (tests/integration/leaks.py); one found fails the session at its end,
    as an error of this fixture's teardown, with the record."""
    watch = LeakWatch()
    root = logging.getLogger()
    level = root.level
    root.addHandler(watch)
    root.setLevel(min(level, logging.INFO))
    yield watch
    root.removeHandler(watch)
    root.setLevel(level)
    if watch.hits:
        pytest.fail(
            f"{len(watch.hits)} log records carried a planted secret:\n"
            + "\n".join(watch.hits[:20]),
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def _drop_test_topics() -> Iterator[None]:
    """Delete the session's Kafka test topics at the end: every test makes its own, and a
    broker left with thousands of them restarts slowly (log recovery per partition).
    Only topics made while this session ran: a topic that was there before belongs to
    someone else (a benchmark, or another session, whose run this sweep once broke by
    deleting its topics mid-burst). While another session runs beside this one, nothing
    is deleted: the topics it made in the same window look like this session's."""
    bootstrap = load_settings().kafka_bootstrap
    try:
        before = _topics(bootstrap)
    except Exception:  # no broker: the tests that need one fail on their own
        before = None
    _SESSIONS.mkdir(parents=True, exist_ok=True)
    mine = _SESSIONS / str(os.getpid())
    mine.touch()
    yield
    mine.unlink(missing_ok=True)
    from confluent_kafka.admin import AdminClient

    if before is None:
        return
    others = []
    for entry in _SESSIONS.iterdir():
        if entry.name.isdigit() and _pid_alive(int(entry.name)):
            others.append(entry.name)
        else:
            entry.unlink(missing_ok=True)  # a session that died without its teardown
    if others:
        print(f"\nKafka test topics left in place: pytest sessions {others} still run")
        return
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [t for t in _topics(bootstrap) - before if _TEST_TOPIC.match(t)]
        if topics:
            for future in admin.delete_topics(topics, operation_timeout=60).values():
                future.result()
    except Exception as exc:  # cleanup only: never fail the run for it
        print(f"\nleft Kafka test topics behind: {exc}")


@pytest.fixture
def browser(settings: Settings, engine: Engine) -> Iterator[Callable[..., TestClient]]:
    """browser(tenant, scopes) -> a signed-in client with its own cookie jar."""
    opened: list[TestClient] = []

    def make(
        tenant: str = "acme",
        scopes: tuple[str, ...] = ("read", "write"),
        base: str = "http://testserver",
    ) -> TestClient:
        client = TestClient(create_app(settings, engine), base_url=base)
        client.__enter__()
        opened.append(client)
        login(client, token_create(engine, tenant, scopes).token)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def served(settings: Settings, engine: Engine) -> Iterator[str]:
    """The API on a free port of this machine, in this process (uvicorn): its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings, engine), host="127.0.0.1", port=0, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):  # bounded: the server starts in well under the limit
        if server.started:
            break
        threading.Event().wait(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
