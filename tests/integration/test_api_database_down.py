"""While PostgreSQL is down (crashed, restarting), the API answers 503 with Retry-After
and the one error body, not a 500 and a traceback: a client (a deploy pipeline, the
chaos workload) can tell an outage it should retry from a bug. Found by the chaos
`random` drill (a PostgreSQL crash while jobs were being created: 500 Internal Server
Error)."""

from __future__ import annotations

import socket

import pytest
from fastapi.testclient import TestClient

from kit.api.app import create_app
from kit.settings import load_settings

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: nobody listens


def test_the_api_answers_503_while_the_database_is_down() -> None:
    url = f"postgresql+psycopg://cronfleet:x@127.0.0.1:{_closed_port()}/cronfleet"
    app = create_app(load_settings(database_url=url))
    with TestClient(app, raise_server_exceptions=False) as client:
        headers = {"Authorization": "Bearer cf_0123456789abcdef_well-formed-but-unchecked"}
        listed = client.get("/v1/jobs", headers=headers)
        created = client.post(
            "/v1/jobs",
            headers=headers,
            json={"name": "x", "schedule": {"every_s": 60}, "task": {"type": "noop"}},
        )
    for answer in (listed, created):
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "1"
        error = answer.json()["error"]
        assert error["code"] == "unavailable"
        assert "database" in error["message"]


def test_the_queue_routes_answer_503_while_the_database_is_down() -> None:
    """The queue's routes run on their own async connections (kit.store.pg_async): a
    connection that cannot be made is the same 503, at once, not a wait or a 500."""
    from datetime import UTC, datetime

    from kit.api.auth import TokenCache
    from kit.store.tokens import TokenInfo

    url = f"postgresql+psycopg://cronfleet:x@127.0.0.1:{_closed_port()}/cronfleet"
    app = create_app(load_settings(database_url=url))
    token = "cf_0123456789abcdef_well-formed-and-cached-secret"
    info = TokenInfo("0123456789abcdef", "acme", ("read", "write"), datetime.now(UTC), None)
    cache = app.state.token_cache
    cache.put(TokenCache.key(token), info, cache.clock())  # auth passes: the route is reached
    with TestClient(app, raise_server_exceptions=False) as client:
        headers = {"Authorization": f"Bearer {token}"}
        answers = [
            client.post("/v1/queues/q/tasks", headers=headers, json={"payload": 1}),
            client.post("/v1/queues/q/lease", headers=headers, json={"worker_id": "w"}),
            client.get("/v1/queues/q/stats", headers=headers),
        ]
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "1"
        assert answer.json()["error"]["code"] == "unavailable"
