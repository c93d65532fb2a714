"""A run that waits to start says why, on the real PostgreSQL and Kafka: at its tenant's
`max_running` (the run page, explain, the console's run and explain pages, from the
tenant's runs the database knows running: kit.core.waiting), or held by a kill switch.
Nothing asserts a duration: the waiting run is read while the other runs (`sleep`)."""

from __future__ import annotations

import threading
import tomllib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.core.switches import Switch, SwitchKind
from kit.core.tenancy import TenantsPolicy
from kit.core.timeutil import to_epoch_ms
from kit.settings import Settings
from kit.store.switches import switch_off
from kit.store.tokens import token_create
from kit.tasks.tenant_policy import local_tenants_toml
from kit.transport import RunMessage, RunPublisher, TieredConsumer
from kit.worker.worker import Worker
from tests.integration.console_client import login
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration

CAPPED = "capped"
POLICY_TOML = local_tenants_toml(["acme"]) + f"\n[tenants.{CAPPED}]\nmax_running = 1\n"
POLICY = TenantsPolicy.parse(tomllib.loads(POLICY_TOML))
NOTE = f"waiting: tenant {CAPPED} at max_running (1 of 1 running)"


@pytest.fixture
def capped_settings(settings: Settings, tmp_path: Path) -> Settings:
    """The API's settings with a tenant policy holding `capped` to one run at once."""
    path = tmp_path / "tenants.toml"
    path.write_text(POLICY_TOML)
    return settings.model_copy(update={"tenant_policy_file": str(path)})


@pytest.fixture
def api(capped_settings: Settings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(capped_settings, engine)) as client:
        yield client


@pytest.fixture
def worker(
    settings: Settings, engine: Engine, prefix: str, publisher: RunPublisher
) -> Iterator[Worker]:
    """One worker of two slots under the same policy; its heartbeat records a start
    within a fraction of a second."""
    consumer = TieredConsumer(
        settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
    )
    w = Worker(
        engine,
        consumer,
        publisher,
        f"w-{uuid.uuid4().hex[:6]}",
        concurrency=2,
        lease_ttl_ms=30_000,
        heartbeat_ms=300,
        tenants=lambda: POLICY,
    )
    stop = threading.Event()
    thread = threading.Thread(target=w.run, args=(stop, 0.5), daemon=True)
    thread.start()
    yield w
    stop.set()
    thread.join(timeout=30)
    consumer.close()


def started(engine: Engine, run_ids: list[str]) -> dict[str, bool]:
    """Whether each run's start is recorded."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT run_id::text, attempt_started_at IS NOT NULL AS started FROM runs "
                "WHERE run_id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": "{" + ",".join(run_ids) + "}"},
        ).all()
    return {r.run_id: r.started for r in rows}


def test_a_run_at_its_tenants_max_running_says_so_in_explain_and_the_console(
    engine: Engine, publisher: RunPublisher, worker: Worker, api: TestClient
) -> None:
    job = make_job(engine, {"type": "sleep", "seconds": 60}, tenant=CAPPED, name="slow")
    now = datetime.now(UTC)
    msgs = []
    for i in range(2):
        at = now + timedelta(milliseconds=i)
        rid = make_run(engine, job, at, tenant=CAPPED)
        msgs.append(RunMessage(rid, job, 1, to_epoch_ms(at), "normal"))
    publisher.publish(msgs)
    ids = [m.run_id for m in msgs]
    wait_until(
        "one run's start is recorded",
        lambda: sum(started(engine, ids).values()) == 1,
        detail=lambda: str(started(engine, ids)),
    )
    state = started(engine, ids)
    [running] = [r for r in ids if state[r]]
    [waiting] = [r for r in ids if not state[r]]
    h = {"Authorization": f"Bearer {token_create(engine, CAPPED, ('read',)).token}"}

    got = api.get(f"/v1/runs/{waiting}", headers=h).json()
    assert got["waiting"] == NOTE, got
    assert got["held"] is None and got["status"] == "running"  # held past its second
    assert api.get(f"/v1/runs/{running}", headers=h).json()["waiting"] is None
    explained = api.get(f"/v1/jobs/{job}/explain", headers=h).json()
    assert explained["waiting"] == NOTE, explained
    assert sum(started(engine, ids).values()) == 1  # still one running: the reads saw it

    login(api, token_create(engine, CAPPED, ("read",)).token)
    page = api.get(f"/console/runs/{waiting}")
    assert page.status_code == 200
    assert f'id="waiting">{NOTE}: it waits' in page.text, page.text[:3000]
    assert 'id="waiting"' not in api.get(f"/console/runs/{running}").text
    assert f'id="waiting">{NOTE}' in api.get(f"/console/jobs/{job}/explain").text


def test_a_run_held_by_a_switch_shows_the_switch_on_the_console_run_page(
    engine: Engine, api: TestClient
) -> None:
    """The API's `held` is tests/integration/test_kill_switch.py's; here the page, and no
    limit note beside it (the switch, not a limit, holds the run)."""
    job = make_job(engine, {"type": "sleep", "seconds": 1}, tenant=CAPPED, name="held")
    held = make_run(engine, job, tenant=CAPPED)
    switch_off(engine, Switch(SwitchKind.tenant, CAPPED), "noisy", "test")
    login(api, token_create(engine, CAPPED, ("read",)).token)
    page = api.get(f"/console/runs/{held}").text
    assert f'id="held">held: switch off for tenant {CAPPED} since ' in page, page[:3000]
    assert "(noisy): it waits" in page and 'id="waiting"' not in page
    explain = api.get(f"/console/jobs/{job}/explain").text
    assert f'id="held">held: switch off for tenant {CAPPED}' in explain
