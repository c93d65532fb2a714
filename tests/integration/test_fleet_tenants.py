"""Per-tenant figures from the workers to the operator's fleet view, on the real
PostgreSQL and Kafka: a worker writes its tenants' figures with its presence row
(kit.worker.tenant_report, kit.store.worker_link), the fleet view sums the live workers'
(kit.core.tenant_figures), and only the operator sees them (GET /v1/fleet, the
console's fleet page). Nothing asserts a duration: counts, and that a lag was measured."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.core.tenancy import TenantsPolicy
from kit.core.timeutil import to_epoch_ms
from kit.settings import Settings
from kit.store.fleet import fleet_read
from kit.store.tokens import token_create
from kit.store.worker_link import presence_upsert, psycopg_url
from kit.transport import RunMessage, RunPublisher, TieredConsumer
from kit.worker.worker import Worker, task_executor
from tests.integration.console_client import login
from tests.integration.test_worker_fair_share import all_succeeded, plant
from tests.integration.waiting import wait_until
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration

ALPHA, BETA = "alpha-tenant", "beta-tenant"
WAIT_S = 60.0


@pytest.fixture
def worked(
    settings: Settings, engine: Engine, prefix: str, publisher: RunPublisher
) -> Iterator[Worker]:
    """A worker of two slots that ran 6 `sleep` runs of ALPHA (on its pool) and 3 `noop`
    runs of BETA (inline: their lags observed later, off the starting path), first
    attempts due a few seconds ago, and is still up, beating its presence every 0.2 s."""
    now = datetime.now(UTC).replace(microsecond=0)
    messages = plant(engine, ALPHA, 6, 0.05, now - timedelta(seconds=3))
    noop = make_job(engine, {"type": "noop"}, tenant=BETA, name=BETA)
    for i in range(3):
        when = now - timedelta(seconds=2, milliseconds=-i)
        rid = make_run(engine, noop, when, tenant=BETA)
        messages.append(RunMessage(rid, noop, 1, to_epoch_ms(when), "normal"))
    publisher.publish(messages)
    consumer = TieredConsumer(
        settings.kafka_bootstrap, f"g-{uuid.uuid4().hex[:8]}", topic_prefix=prefix
    )
    worker = Worker(
        engine,
        consumer,
        publisher,
        f"w-{uuid.uuid4().hex[:6]}",
        concurrency=2,
        lease_ttl_ms=600_000,
        execute=task_executor(),
        tenants=lambda: TenantsPolicy(),
    )
    worker.link.presence_s = 0.2
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop, 5.0), daemon=True)
    thread.start()
    try:
        wait_until("every run succeeded", all_succeeded(engine, 9), WAIT_S)
        yield worker
    finally:
        stop.set()
        thread.join(timeout=30)
        consumer.close()


def presence_tenants(engine: Engine, worker_id: str) -> dict[str, Any] | None:
    with engine.connect() as conn:
        got = conn.execute(
            text("SELECT tenants FROM workers WHERE worker_id = :w"), {"w": worker_id}
        ).scalar_one_or_none()
    return got if isinstance(got, dict) else None


def reported(engine: Engine, worker_id: str, counts: dict[str, int]) -> Callable[[], bool]:
    """The worker's presence row has each tenant's `started` at its count."""

    def check() -> bool:
        tenants = presence_tenants(engine, worker_id) or {}
        return all(tenants.get(t, {}).get("started") == n for t, n in counts.items())

    return check


def test_a_workers_presence_row_carries_each_tenants_figures(
    engine: Engine, worked: Worker
) -> None:
    wid = worked.worker_id
    wait_until(
        "both tenants in the presence row",
        reported(engine, wid, {ALPHA: 6, BETA: 3}),
        WAIT_S,
        lambda: str(presence_tenants(engine, wid)),
    )
    tenants = presence_tenants(engine, wid)
    assert tenants is not None
    for tenant in (ALPHA, BETA):
        fig = tenants[tenant]
        assert fig["lag_p99_s"] is not None and fig["lag_p99_s"] > 0, fig  # due seconds ago
        assert fig["waiting_share"] == 0 and fig["waiting_limit"] == 0, fig  # all ran
        assert fig["limited"] == 0, fig
    # the same lag on /metrics, per tenant
    metrics = worked.metrics
    count = "cronfleet_worker_tenant_start_lag_seconds_count"
    assert metrics.value(count, tenant=ALPHA) == 6
    assert metrics.value(count, tenant=BETA) == 3


def operated(settings: Settings) -> Settings:
    return Settings(**{**settings.model_dump(), "operator_tenant": "ops"})


def bearer(engine: Engine, tenant: str, *scopes: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_create(engine, tenant, scopes).token}"}


def test_the_operator_sees_a_row_per_tenant_and_a_tenant_sees_none(
    settings: Settings, engine: Engine, worked: Worker
) -> None:
    wait_until(
        "both tenants reported",
        reported(engine, worked.worker_id, {ALPHA: 6, BETA: 3}),
        WAIT_S,
        lambda: str(presence_tenants(engine, worked.worker_id)),
    )
    with TestClient(create_app(operated(settings), engine)) as client:
        got = client.get("/v1/fleet", headers=bearer(engine, "ops", "admin"))
        refused = client.get("/v1/fleet", headers=bearer(engine, ALPHA, "read", "admin"))
        login(client, token_create(engine, "ops", ("read", "admin")).token)
        page = client.get("/console/fleet")
    assert got.status_code == 200, got.text
    rows = {t["tenant"]: t for t in got.json()["tenants"]}
    assert rows[ALPHA]["started"] == 6 and rows[BETA]["started"] == 3, rows
    assert rows[ALPHA]["lag_p99_s"] is not None
    assert got.json()["tenants_window_s"] == 60
    assert refused.status_code == 403 and BETA not in refused.text
    assert page.status_code == 200
    table = page.text[page.text.index('id="tenants"') :]
    table = table[: table.index("</table>")]
    assert f'<code>{ALPHA}</code></td><td class="count">6</td>' in table, table
    assert f'<code>{BETA}</code></td><td class="count">3</td>' in table, table

    with TestClient(create_app(operated(settings), engine)) as client:
        login(client, token_create(engine, ALPHA, ("read", "admin")).token)
        mine = client.get("/console/fleet")
    assert mine.status_code == 200
    assert BETA not in mine.text and 'id="tenants"' not in mine.text


def test_the_fleet_sums_the_live_workers_reports_and_skips_the_stale(engine: Engine) -> None:
    """Counts summed, the lag the largest p99; a worker whose presence is stale counts for
    nothing, nor one that reports no figures."""
    now = datetime.now(UTC)
    fig = {"started": 4, "waiting_share": 1, "waiting_limit": 2, "limited": 3}
    with psycopg.connect(psycopg_url(engine), autocommit=True) as conn:
        presence_upsert(conn, "w-a", 2, 0, tenants={ALPHA: {**fig, "lag_p99_s": 0.5}}, now=now)
        presence_upsert(
            conn,
            "w-b",
            2,
            0,
            tenants={ALPHA: {**fig, "lag_p99_s": 1.5}, BETA: {**fig, "lag_p99_s": None}},
            now=now,
        )
        presence_upsert(conn, "w-old", 2, 0, tenants={ALPHA: {**fig, "lag_p99_s": 9.0}},
                        now=now - timedelta(minutes=5))  # fmt: skip
        presence_upsert(conn, "w-none", 2, 0, now=now)
    view = fleet_read(engine, 4, 10_000, now=now)
    rows = {t.tenant: t for t in view.tenants}
    assert set(rows) == {ALPHA, BETA}
    a = rows[ALPHA]
    assert (a.started, a.waiting_share, a.waiting_limit, a.limited) == (8, 2, 4, 6)
    assert a.lag_p99_s == 1.5  # the largest live p99, not the stale worker's 9.0
    assert rows[BETA].started == 4 and rows[BETA].lag_p99_s is None
