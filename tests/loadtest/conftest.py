"""The load tests' kit: a fresh database, run topics of its own and the services as
processes (`cronfleet run-all`), started per test with the settings the suites need
(an execution journal, loopback allowed for http tasks)."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from kit.settings import load_settings
from kit.store import migrate
from kit.tasks.tenant_policy import local_tenants_toml

REPO = Path(__file__).resolve().parents[2]
_counter = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def database_url() -> Iterator[str]:
    base = load_settings().database_url
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    name = f"cf_lt_{os.getpid()}_{next(_counter)}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        pytest.fail(f"the local stack is not up: run `cronfleet stack up` ({exc})", pytrace=False)
    url = make_url(base).set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(url)
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@dataclass
class Kit:
    """A running kit for one test, and how to run a suite against it."""

    env: dict[str, str]
    api_url: str
    journal: Path
    prefix: str
    group: str
    out: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, *argv: str, log: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            list(argv),
            env=self.env,
            cwd=REPO,
            stdout=(self.out / log).open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def run_all(self, workers: int, concurrency: int = 64) -> None:
        port = self.api_url.rsplit(":", 1)[1]
        self.start(
            sys.executable,
            "-m",
            "kit.cli",
            "run-all",
            "--workers",
            str(workers),
            "--concurrency",
            str(concurrency),
            "--api-port",
            port,
            "--topic-prefix",
            self.prefix,
            "--group-id",
            self.group,
            "--metrics-base-port",
            "0",
            "--drain-s",
            "2",
            "--stop-timeout-s",
            "15",
            log="run-all.log",
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.api_url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError((self.out / "run-all.log").read_text()[-3000:])
            time.sleep(0.3)

    def suite(self, suite: str, *args: str, timeout_s: float = 240) -> subprocess.CompletedProcess:
        """`python -m loadtest SUITE` against this kit; its output dir is out/<suite>. In
        a session of its own: on timeout the whole group goes, Locust included (killing
        only `python -m loadtest` left a spinning Locust behind for half an hour)."""
        out = self.out / suite
        argv = [sys.executable, "-m", "loadtest", suite, "--host", self.api_url]
        argv += ["--out", str(out), *args, "--loglevel", "WARNING"]
        proc = subprocess.Popen(
            argv,
            env=self.env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


# The suites' tenant (every tier: `--priority critical` is the operator's to grant) and
# the noisy suite's tenant A, held to 20 API requests per second.
TENANT_POLICY = (
    local_tenants_toml(["loadtest"]) + "[tenants.lt-noisy]\napi_rate_per_s = 20\napi_burst = 20\n"
)


@pytest.fixture
def kit(database_url: str, tmp_path: Path) -> Iterator[Kit]:
    prefix = f"cf.lt.{uuid.uuid4().hex[:10]}"
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(TENANT_POLICY)
    env = dict(os.environ)
    env.update(
        {
            "CRONFLEET_DATABASE_URL": database_url,
            "CRONFLEET_TENANT_POLICY_FILE": str(tenants),
            "CRONFLEET_EXECUTION_JOURNAL_DIR": str(tmp_path / "journal"),
            "CRONFLEET_HTTP_ALLOW_HOSTS": "127.0.0.1",
            "CRONFLEET_RUN_TOPIC_PARTITIONS": "2",
            "PYTHONUNBUFFERED": "1",
        }
    )
    kit = Kit(
        env=env,
        api_url=f"http://127.0.0.1:{free_port()}",
        journal=tmp_path / "journal",
        prefix=prefix,
        group=f"{prefix}.workers",
        out=tmp_path,
    )
    yield kit
    kit.stop()
    _drop_topics(prefix)


def _drop_topics(prefix: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": load_settings().kafka_bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
    if topics:
        for future in admin.delete_topics(topics).values():
            future.result(timeout=30)
