"""The HTTP API fuzzed from its own OpenAPI document (schemathesis), on the real
PostgreSQL (issue 7, "Must show").

For every operation the document lists, schemathesis generates requests that fit the
document and requests that do not (positive and negative modes), a bounded number per
operation (CRONFLEET_FUZZ_EXAMPLES, default 40). Each request carries a token drawn
from every scope (read, write, admin, command, all of them), none, or a bogus one, and
its path ids are now and then replaced by real ids: the caller's own, or those of a
second tenant. Every answer must:

- not be a 5xx;
- be documented: its status code, content type and body match the document;
- show nothing of the other tenant: none of its ids, names, payloads or lease tokens
  appears in any answer, and its queue looks empty.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import Engine

from kit.api.app import create_app
from kit.settings import Settings, load_settings
from kit.store.claims import Claim, run_finish_failed, runs_claim
from kit.store.tokens import token_create
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("CRONFLEET_FUZZ_EXAMPLES", "40"))
SCOPE_SETS = (
    ("read",),
    ("write",),
    ("admin",),
    ("command",),
    ("read", "write"),
    ("read", "write", "command"),
    ("read", "write", "admin", "command"),
)
BOGUS = "cf_0000000000000000_" + "x" * 30
RIVAL = "rival"
RIVAL_JOB_NAME = "rival-secret-job-3b9f"
RIVAL_PAYLOAD = "rival-payload-marker-77c1"
RIVAL_QUEUE = "rival-q"
T0 = datetime(2030, 1, 1, tzinfo=UTC)


@dataclass
class World:
    """What the fuzzer's caller (tenant acme) owns, and what the rival owns."""

    tokens: list[str | None] = field(default_factory=list)  # acme's, a scope set each
    own: dict[str, list[str]] = field(default_factory=dict)  # path parameter -> acme's ids
    rival: dict[str, list[str]] = field(default_factory=dict)  # path parameter -> rival's ids
    rival_markers: list[str] = field(default_factory=list)  # must never be answered


def _seed_tenant(client: TestClient, engine: Engine, tenant: str, token: str) -> dict[str, Any]:
    """A job (with a run, a dead letter) and a queue with a leased and a queued task."""
    headers = {"Authorization": f"Bearer {token}"}
    name = RIVAL_JOB_NAME if tenant == RIVAL else f"{tenant}-job"
    job_id = make_job(engine, tenant=tenant, name=name, retry={"max_attempts": 1})
    run = client.post(f"/v1/jobs/{job_id}/runs", headers=headers)
    assert run.status_code == 202, run.text
    dead = make_run(engine, job_id, tenant=tenant, scheduled_at=T0)
    [claimed] = runs_claim(engine, [Claim(dead, 1)], "w", 30_000)
    run_finish_failed(engine, dead, claimed.lease_token, f"{tenant} failed", random.Random(0))
    queue = RIVAL_QUEUE if tenant == RIVAL else f"{tenant}-q"
    payload = {"marker": RIVAL_PAYLOAD if tenant == RIVAL else "mine"}
    tasks = []
    for _ in range(2):
        created = client.post(
            f"/v1/queues/{queue}/tasks", json={"payload": payload}, headers=headers
        )
        assert created.status_code == 201, created.text
        tasks.append(created.json()["task_id"])
    leased = client.post(f"/v1/queues/{queue}/lease", json={"worker_id": "w"}, headers=headers)
    [lease] = leased.json()["tasks"]
    return {
        "job_id": [job_id],
        "run_id": [run.json()["run_id"], dead],
        "task_id": tasks,
        "queue": [queue],
        "lease_token": lease["lease_token"],
    }


# The document is the app's own; schemathesis reads it when this module is imported, so
# the app is made here, and each test points it at its own fresh database (the document
# does not depend on it). `schemathesis.pytest.from_fixture` would build it per test,
# but fails under pytest 9 (it reads `request.node._nodeid`, gone).
APP = create_app(load_settings())
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=EXAMPLES
)
# Generated requests only (the document's own examples take no drawn token or id).
schema.config.phases.update(phases=["coverage", "fuzzing"])


@pytest.fixture
def fuzz_app(settings: Settings, engine: Engine) -> Iterator[FastAPI]:
    """The API on this test's database, with the tests' task policy (tenant acme may run
    /bin/echo and /bin/sh)."""
    fresh = create_app(settings, engine)
    saved = dict(APP.state._state)
    APP.state._state.update(fresh.state._state)
    yield APP
    APP.state._state.clear()
    APP.state._state.update(saved)


@pytest.fixture
def world(fuzz_app: FastAPI, engine: Engine) -> World:
    everything = ("read", "write", "admin", "command")
    with TestClient(fuzz_app) as client:
        rival = _seed_tenant(client, engine, RIVAL, token_create(engine, RIVAL, everything).token)
        own = _seed_tenant(client, engine, "acme", token_create(engine, "acme", everything).token)
    tokens: list[str | None] = [token_create(engine, "acme", s).token for s in SCOPE_SETS]
    markers = [*rival["job_id"], *rival["run_id"], *rival["task_id"], rival["lease_token"]]
    markers += [RIVAL_JOB_NAME, RIVAL_PAYLOAD, "rival failed"]
    return World(
        tokens=tokens,
        own={k: v for k, v in own.items() if k != "lease_token"},
        rival={k: v for k, v in rival.items() if k != "lease_token"},
        rival_markers=markers,
    )


@schema.parametrize()
@schema.given(data=st.data())
@hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same requests on every run; a failure is reproducible
    suppress_health_check=list(HealthCheck),
)
def test_api_answers_every_request_within_its_document(
    case: Any, data: st.DataObject, world: World, fuzz_app: FastAPI
) -> None:
    # Half the requests carry the token that may do everything, so handlers are reached
    # past the scope check; the rest are spread over every scope, none and a bogus one.
    if data.draw(st.booleans(), label="full scopes"):
        token = world.tokens[-1]
    else:
        token = data.draw(st.sampled_from([*world.tokens[:-1], None, BOGUS]), label="token")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    swapped: dict[str, str] = {}
    for name in list(case.path_parameters or {}):
        choices = world.own.get(name, []) + world.rival.get(name, [])
        if choices and data.draw(st.booleans(), label=f"real {name}"):
            swapped[name] = data.draw(st.sampled_from(choices), label=name)
            case.path_parameters[name] = swapped[name]
    response = case.call(headers={**(case.headers or {}), **headers})
    case.validate_response(
        response,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
        headers=headers,
    )
    text = response.text
    leaked = [m for m in world.rival_markers if m in text]
    assert not leaked, (
        f"tenant acme was shown {RIVAL}'s {leaked}: {response.status_code} {text[:300]}"
    )
    if swapped.get("queue") == RIVAL_QUEUE and response.status_code == 200:
        body = response.json()
        assert not body.get("tasks") and not body.get("queued") and not body.get("leased"), body
