"""What each caller sees of the fleet: a tenant its own runs (GET /v1/in-flight), the
operator the fleet (GET /v1/fleet, a token of CRONFLEET_OPERATOR_TENANT with `admin`),
and the broker read once per sample period whatever the request rate."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

import kit.api.fleet
from kit.api.app import create_app
from kit.settings import Settings
from kit.store.tokens import token_create
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration

FLEET_WIDE = ("node-secret-9", "worker-of-globex-17", "consumer_group", "cronfleet.runs")


@pytest.fixture
def rows(engine: Engine) -> None:
    """globex: a run running on a worker; acme: one run of each kind; a scheduler node."""
    now = datetime.now(UTC).replace(microsecond=0)
    other = make_job(engine, tenant="globex", name="globex-job")
    make_run(
        engine, other, tenant="globex", status="running", worker_id="worker-of-globex-17",
        lease_token="t",
    )  # fmt: skip
    mine = make_job(engine, name="mine")
    make_run(engine, mine, now - timedelta(seconds=30), status="pending")
    make_run(engine, mine, now - timedelta(seconds=20), status="pending")
    make_run(engine, mine, now + timedelta(hours=1), status="pending")  # written ahead
    make_run(engine, mine, now - timedelta(seconds=10), status="running", lease_token="t")
    make_run(engine, mine, now - timedelta(seconds=40), status="retry_scheduled")
    make_run(engine, mine, now - timedelta(seconds=50), status="succeeded")
    urgent = make_job(engine, name="urgent")
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET priority = 'critical' WHERE job_id = :j"), {"j": urgent})
        conn.execute(
            text(
                "INSERT INTO scheduler_nodes (node_id, heartbeat_at) "
                "VALUES ('node-secret-9', now());"
                "UPDATE runs SET lease_expires_at = now() + interval '1 hour' "
                "WHERE status = 'running'"
            )
        )
    make_run(engine, urgent, now - timedelta(seconds=5), status="pending", priority="critical")


@pytest.fixture
def operated(settings: Settings) -> Settings:
    return Settings(**{**settings.model_dump(), "operator_tenant": "ops"})


def bearer(engine: Engine, tenant: str, *scopes: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_create(engine, tenant, scopes).token}"}


def test_a_tenants_admin_token_sees_nothing_fleet_wide(
    operated: Settings, engine: Engine, rows: None
) -> None:
    with TestClient(create_app(operated, engine)) as client:
        got = client.get("/v1/fleet", headers=bearer(engine, "acme", "admin"))
    assert got.status_code == 403
    assert "operator" in got.json()["error"]["message"]
    for fleet_wide in FLEET_WIDE:
        assert fleet_wide not in got.text


def test_without_an_operator_tenant_no_token_sees_the_fleet(
    settings: Settings, engine: Engine, rows: None
) -> None:
    with TestClient(create_app(settings, engine)) as client:
        for tenant in ("acme", "ops"):
            got = client.get("/v1/fleet", headers=bearer(engine, tenant, "read", "admin"))
            assert got.status_code == 403, tenant


def test_the_operator_sees_the_fleet(operated: Settings, engine: Engine, rows: None) -> None:
    with TestClient(create_app(operated, engine)) as client:
        assert client.get("/v1/fleet", headers=bearer(engine, "ops", "read")).status_code == 403
        got = client.get("/v1/fleet", headers=bearer(engine, "ops", "admin"))
    assert got.status_code == 200, got.text
    body = got.json()
    assert "node-secret-9" in {n["node_id"] for n in body["nodes"]}
    workers = {w["worker_id"]: w["in_flight"] for w in body["workers"]}
    assert workers["worker-of-globex-17"] == 1
    assert body["lag_sampled_at"] and body["consumer_group"]


def test_a_tenant_sees_its_own_runs_in_flight_per_tier(
    settings: Settings, engine: Engine, rows: None
) -> None:
    with TestClient(create_app(settings, engine)) as client:
        got = client.get("/v1/in-flight", headers=bearer(engine, "acme", "read"))
        globex = client.get("/v1/in-flight", headers=bearer(engine, "globex", "read")).json()
        refused = client.get("/v1/in-flight", headers=bearer(engine, "acme", "write"))
    assert got.status_code == 200 and refused.status_code == 403
    tiers = {t["tier"]: t for t in got.json()["tiers"]}
    assert [t["tier"] for t in got.json()["tiers"]] == ["critical", "high", "normal", "low"]
    normal = tiers["normal"]
    assert (normal["waiting"], normal["ahead"], normal["running"], normal["retry_scheduled"]) == (
        2,
        1,
        1,
        1,
    )
    assert normal["oldest_waiting_at"] is not None
    assert tiers["critical"]["waiting"] == 1 and tiers["low"]["waiting"] == 0
    for fleet_wide in FLEET_WIDE:
        assert fleet_wide not in got.text
    assert sum(t["running"] for t in globex["tiers"]) == 1  # its own run, not acme's


@pytest.fixture
def broker_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Each real read of the broker's lag (kit.transport.lag.tier_lags) the API makes."""
    reads: list[float] = []
    real: Callable[..., Any] = kit.api.fleet.tier_lags

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(datetime.now(UTC).timestamp())
        return real(*args, **kwargs)

    monkeypatch.setattr(kit.api.fleet, "tier_lags", counted)
    # one sample period longer than the test: any second read would be per request
    monkeypatch.setattr(kit.api.fleet, "LAG_SAMPLE_S", 3600.0, raising=False)
    yield reads


def flood(client: TestClient, headers: dict[str, str], threads: int, each: int) -> list[int]:
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        for _ in range(each):
            status = client.get("/v1/fleet", headers=headers).status_code
            with lock:
                statuses.append(status)

    workers = [threading.Thread(target=one) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    return statuses


def test_a_flood_of_fleet_requests_reads_the_broker_once(
    operated: Settings, engine: Engine, broker_reads: list[float]
) -> None:
    with TestClient(create_app(operated, engine)) as client:
        tenant = flood(client, bearer(engine, "acme", "admin"), threads=12, each=3)
        assert set(tenant) == {403} and broker_reads == []  # a tenant's token costs no read
        operator = flood(client, bearer(engine, "ops", "admin"), threads=12, each=3)
    assert operator == [200] * 36
    assert len(broker_reads) == 1
