"""Deny by default: every /v1 route needs a live bearer token with the right scope, and
every object is scoped to its tenant (another tenant's id is a 404, never a 403)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from kit.api.app import create_app
from kit.settings import Settings
from kit.store.tokens import token_create, token_revoke

pytestmark = pytest.mark.integration

JOB = {"name": "nightly", "schedule": {"cron": "0 3 * * *"}, "task": {"type": "noop"}}
NIL = "00000000-0000-0000-0000-000000000000"
ROUTES = [
    ("get", f"/v1/jobs/{NIL}"),
    ("post", "/v1/jobs"),
    ("post", "/v1/jobs:batch"),
    ("patch", f"/v1/jobs/{NIL}"),
    ("delete", f"/v1/jobs/{NIL}"),
    ("get", f"/v1/jobs/{NIL}/runs"),
    ("post", f"/v1/jobs/{NIL}/runs"),
    ("get", f"/v1/runs/{NIL}"),
    ("get", "/v1/no-such-route"),
]


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    return error


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_v1_route_refuses_a_request_without_token(
    client: TestClient, method: str, path: str
) -> None:
    response = client.request(method, path, json=JOB)
    assert_error(response, 401, "unauthorized")
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    [
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer not-a-token",
        "Bearer cf_0123456789abcdef_" + "x" * 43,  # well-formed, unknown id
    ],
)
def test_malformed_or_unknown_tokens_are_401(client: TestClient, header: str) -> None:
    assert_error(
        client.get(f"/v1/jobs/{NIL}", headers={"Authorization": header}), 401, "unauthorized"
    )


class FakeClock:
    """The token cache's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_wrong_secret_and_revoked_tokens_are_401(client: TestClient, engine: Engine) -> None:
    """A revoked token stops working at most CRONFLEET_API_TOKEN_CACHE_S (5 s) after the
    revoke: the API process trusts a token it verified that long, never longer."""
    clock = FakeClock()
    cache = client.app.state.token_cache
    cache.clock = clock
    assert cache.ttl_s == 5
    issued = token_create(engine, "acme", ["read", "write"])
    good = {"Authorization": f"Bearer {issued.token}"}
    assert client.post("/v1/jobs", json=JOB, headers=good).status_code == 201
    # the same id with another secret is not the cached token: refused
    tampered = issued.token[:-2] + ("zz" if not issued.token.endswith("zz") else "yy")
    bad = {"Authorization": f"Bearer {tampered}"}
    assert_error(client.get(f"/v1/jobs/{NIL}", headers=bad), 401, "unauthorized")
    assert token_revoke(engine, issued.token_id)
    clock.now += cache.ttl_s - 0.001  # verified before the revoke: still trusted...
    assert client.get(f"/v1/jobs/{NIL}", headers=good).status_code == 404
    clock.now += 0.001  # ...until the bound, then asked again and refused
    assert_error(client.get(f"/v1/jobs/{NIL}", headers=good), 401, "unauthorized")
    clock.now += 3600  # and a refusal is never cached: still refused
    assert_error(client.get(f"/v1/jobs/{NIL}", headers=good), 401, "unauthorized")


def test_without_the_token_cache_a_revoke_is_immediate(settings: Settings, engine: Engine) -> None:
    with TestClient(create_app(settings.model_copy(update={"api_token_cache_s": 0}), engine)) as c:
        issued = token_create(engine, "acme", ["read"])
        good = {"Authorization": f"Bearer {issued.token}"}
        assert c.get(f"/v1/jobs/{NIL}", headers=good).status_code == 404
        assert token_revoke(engine, issued.token_id)
        assert_error(c.get(f"/v1/jobs/{NIL}", headers=good), 401, "unauthorized")


def test_a_token_is_cached_for_its_own_scopes_only(client: TestClient, engine: Engine) -> None:
    """A cached read token is still refused a write: the cache keeps the token's scopes."""
    reader = {"Authorization": f"Bearer {token_create(engine, 'acme', ['read']).token}"}
    assert client.get(f"/v1/jobs/{NIL}", headers=reader).status_code == 404
    assert_error(client.post("/v1/jobs", json=JOB, headers=reader), 403, "forbidden")


def test_scopes_read_write_admin(
    client: TestClient, auth: Callable[..., dict[str, str]], row_counts: Callable
) -> None:
    reader, writer, admin = auth(scopes=["read"]), auth(scopes=["write"]), auth(scopes=["admin"])
    before = row_counts()
    error = assert_error(client.post("/v1/jobs", json=JOB, headers=reader), 403, "forbidden")
    assert "write" in error["message"]
    assert row_counts() == before
    job_id = client.post("/v1/jobs", json=JOB, headers=writer).json()["job_id"]
    assert_error(client.get(f"/v1/jobs/{job_id}", headers=writer), 403, "forbidden")
    assert client.get(f"/v1/jobs/{job_id}", headers=reader).status_code == 200
    assert_error(client.delete(f"/v1/jobs/{job_id}", headers=reader), 403, "forbidden")
    assert client.get(f"/v1/jobs/{job_id}", headers=admin).status_code == 200
    assert (
        client.patch(f"/v1/jobs/{job_id}", json={"paused": True}, headers=admin).status_code == 200
    )


def test_health_and_docs_need_no_token(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    spec = client.get("/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs:batch", "/v1/jobs/{job_id}", "/v1/runs/{run_id}"} <= set(
        spec["paths"]
    )
    assert spec["paths"]["/v1/jobs"]["post"]["security"] == [{"bearer": []}]
    assert client.get("/docs").status_code == 200


def test_other_tenants_objects_are_not_found(
    client: TestClient, auth: Callable[..., dict[str, str]]
) -> None:
    acme, rival = auth("acme"), auth("rival")
    job = client.post("/v1/jobs", json=JOB, headers=acme).json()
    run = client.post(f"/v1/jobs/{job['job_id']}/runs", headers=acme).json()
    attempts = [
        client.get(f"/v1/jobs/{job['job_id']}", headers=rival),
        client.patch(f"/v1/jobs/{job['job_id']}", json={"paused": True}, headers=rival),
        client.delete(f"/v1/jobs/{job['job_id']}", headers=rival),
        client.get(f"/v1/jobs/{job['job_id']}/runs", headers=rival),
        client.post(f"/v1/jobs/{job['job_id']}/runs", headers=rival),
        client.get(f"/v1/runs/{run['run_id']}", headers=rival),
    ]
    for response in attempts:
        assert_error(response, 404, "not_found")
    mine = client.get(f"/v1/jobs/{job['job_id']}", headers=acme).json()
    assert mine == job  # untouched: not paused, same version
    assert [
        r["run_id"]
        for r in client.get(f"/v1/jobs/{job['job_id']}/runs", headers=acme).json()["runs"]
    ] == [run["run_id"]]
    # The rival may use the same name: names are per tenant.
    assert client.post("/v1/jobs", json=JOB, headers=rival).status_code == 201


def test_metrics_count_requests_by_route_template_including_refused_ones(
    client: TestClient, auth: Callable[..., dict[str, str]]
) -> None:
    missing = "00000000-0000-0000-0000-000000000001"
    assert client.get(f"/v1/jobs/{missing}", headers=auth()).status_code == 404
    assert client.get(f"/v1/jobs/{missing}").status_code == 401  # refused before routing
    samples = {
        ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1])
        for ln in client.get("/metrics").text.splitlines()
        if ln.startswith("cronfleet_api_requests_total{")
    }
    routed = 'cronfleet_api_requests_total{method="GET",route="/v1/jobs/{job_id}",status="404"}'
    refused = 'cronfleet_api_requests_total{method="GET",route="unmatched",status="401"}'
    assert samples[routed] >= 1 and samples[refused] >= 1
    assert not any(missing in key for key in samples)  # ids never become labels
