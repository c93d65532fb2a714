"""The HTTP API fuzzed from its own OpenAPI document (schemathesis), on the real
PostgreSQL (issue 7, "Must show").

For every operation the document lists, schemathesis generates requests that fit the
document and requests that do not (positive and negative modes), a bounded number per
operation (CRONFLEET_FUZZ_EXAMPLES, default 40). Each request carries a token drawn
from every scope (read, write, admin, command, all of them), none, or a bogus one, and
its path ids are now and then replaced by real ids (the caller's own, or those of a
second tenant) or by another spelling of one (`urn:uuid:`, braces, odd hyphens, capitals,
5,000 characters, Arabic-Indic digits: what `uuid.UUID()` reads and PostgreSQL may
not). Both tenants' jobs carry planted secrets (an Authorization header, a secret
header, credentials in the URL: tests/integration/leaks.py). Every answer must:

- not be a 5xx;
- be documented: its status code, content type and body match the document;
- show nothing of the other tenant: none of its ids, names, payloads or lease tokens
  appears in any answer, and its queue looks empty;
- show no planted secret, to any scope, the owner's included (they are write-only);

and no log record of the API may carry a planted secret. Every id parameter of the
document also gets every spelling as an explicit example
(`test_every_id_parameter_refuses_every_spelling`), and routes outside the document
(`EXTRA_ROUTES`) get the same answers-and-logs checks.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

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
from kit.api.ids import ID_FIELDS, UUID_REASON
from kit.settings import Settings, load_settings
from kit.store.claims import Claim, run_finish_failed, runs_claim
from kit.store.tokens import token_create
from tests.integration.leaks import LeakWatch, plant
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
ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def spellings(canonical: str) -> list[str]:
    """Other spellings of an id: each names no object, and each is refused with 422."""
    bare = canonical.replace("-", "")
    return [
        f"urn:uuid:{canonical}",
        "{" + canonical + "}",
        "-".join(bare[i : i + 4] for i in range(0, 32, 4)),  # hyphens in odd places
        bare,
        canonical.translate(ARABIC_INDIC),
        (canonical * 139)[:5000],
    ]


# Routes outside the OpenAPI document the harness also reaches, with the same tokens and
# the same checks on answers and logs (no 5xx, no planted secret, nothing of the other
# tenant): a method, a path template ({job_id}, {run_id} filled from the world, or a
# spelling), and query fields to fill with the id spellings. The console's forms have
# their own fuzz (tests/integration/test_console_fuzz.py); a route added here is reached
# with bearer tokens.
EXTRA_ROUTES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("GET", "/healthz", ()),
    ("GET", "/metrics", ()),
    ("GET", "/console/jobs/{job_id}", ()),
    ("GET", "/console/jobs/{job_id}/explain", ("from", "to")),
    ("GET", "/console/preview", ("every_s", "at", "cron")),
    ("POST", "/console/runs/{run_id}/cancel", ("next",)),
)


@dataclass
class World:
    """What the fuzzer's caller (tenant acme) owns, and what the rival owns."""

    tokens: list[str | None] = field(default_factory=list)  # acme's, a scope set each
    own: dict[str, list[str]] = field(default_factory=dict)  # path parameter -> acme's ids
    rival: dict[str, list[str]] = field(default_factory=dict)  # path parameter -> rival's ids
    rival_markers: list[str] = field(default_factory=list)  # must never be answered
    secrets: list[str] = field(default_factory=list)  # planted: never answered, never logged


def _seed_tenant(client: TestClient, engine: Engine, tenant: str, token: str) -> dict[str, Any]:
    """A job (with a run, a dead letter), a job whose task carries planted secrets, and a
    queue with a leased and a queued task."""
    headers = {"Authorization": f"Bearer {token}"}
    secrets = [plant(f"{tenant}'s {what}") for what in ("Authorization", "key", "URL password")]
    secret_job = client.post(
        "/v1/jobs",
        json={
            "name": f"{tenant}-secret-job",
            "schedule": {"every_s": 3600},
            "task": {
                "type": "http",
                "method": "POST",
                "url": f"https://user:{secrets[2]}@example.org/hook",
                "headers": {"Authorization": f"Bearer {secrets[0]}", "X-Key": secrets[1]},
                "secret_headers": ["X-Key"],
            },
        },
        headers=headers,
    )
    assert secret_job.status_code == 201, secret_job.text
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
        "job_id": [job_id, secret_job.json()["job_id"]],
        "run_id": [run.json()["run_id"], dead],
        "task_id": tasks,
        "queue": [queue],
        "lease_token": lease["lease_token"],
        "secrets": secrets,
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
def leak_watch() -> Iterator[LeakWatch]:
    """The log records of this test, searched for the planted secrets as they come."""
    watch = LeakWatch()
    root = logging.getLogger()
    level = root.level
    root.addHandler(watch)
    root.setLevel(min(level, logging.INFO))
    yield watch
    root.removeHandler(watch)
    root.setLevel(level)


@pytest.fixture
def world(fuzz_app: FastAPI, engine: Engine, leak_watch: LeakWatch) -> World:
    """Both tenants seeded, the test's log watch already on (what seeding logs counts)."""
    everything = ("read", "write", "admin", "command")
    with TestClient(fuzz_app) as client:
        rival = _seed_tenant(client, engine, RIVAL, token_create(engine, RIVAL, everything).token)
        own = _seed_tenant(client, engine, "acme", token_create(engine, "acme", everything).token)
    tokens: list[str | None] = [token_create(engine, "acme", s).token for s in SCOPE_SETS]
    markers = [*rival["job_id"], *rival["run_id"], *rival["task_id"], rival["lease_token"]]
    markers += [RIVAL_JOB_NAME, RIVAL_PAYLOAD, "rival failed"]
    kept = ("job_id", "run_id", "task_id", "queue")
    return World(
        tokens=tokens,
        own={k: v for k, v in own.items() if k in kept},
        rival={k: v for k, v in rival.items() if k in kept},
        rival_markers=markers,
        secrets=[*own["secrets"], *rival["secrets"]],
    )


def assert_nothing_leaked(world: World, watch: LeakWatch, text: str, status: int) -> None:
    """The checks every answer of the harness gets, in the document or not."""
    assert status < 500, f"{status}: {text[:300]}"
    leaked = [m for m in world.rival_markers if m in text]
    assert not leaked, f"tenant acme was shown {RIVAL}'s {leaked}: {status} {text[:300]}"
    secrets = [s for s in world.secrets if s in text]
    assert not secrets, f"a planted secret was answered: {status} {text[:300]}"
    assert not watch.hits, watch.hits


@schema.parametrize()
@schema.given(data=st.data())
@hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same requests on every run; a failure is reproducible
    suppress_health_check=list(HealthCheck),
)
def test_api_answers_every_request_within_its_document(
    case: Any, data: st.DataObject, world: World, fuzz_app: FastAPI, leak_watch: LeakWatch
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
            if name in ID_FIELDS and data.draw(st.booleans(), label=f"spell {name}"):
                swapped[name] = data.draw(st.sampled_from(spellings(swapped[name])))
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
    assert_nothing_leaked(world, leak_watch, response.text, response.status_code)
    if swapped.get("queue") == RIVAL_QUEUE and response.status_code == 200:
        body = response.json()
        assert not body.get("tasks") and not body.get("queued") and not body.get("leased"), body


def _id_operations() -> list[tuple[str, str, list[str], list[str]]]:
    """(method, path, id path parameters, id query parameters) of every operation of the
    document that takes an id, read from the document (a new route is covered as it is
    added)."""
    found = []
    for path, operations in APP.openapi()["paths"].items():
        for method, operation in operations.items():
            params = operation.get("parameters", [])
            in_path = [p["name"] for p in params if p["in"] == "path" and p["name"] in ID_FIELDS]
            in_query = [p["name"] for p in params if p["in"] == "query" and p["name"] in ID_FIELDS]
            if in_path or in_query:
                found.append((method.upper(), path, in_path, in_query))
    return found


def test_every_id_parameter_refuses_every_spelling(
    world: World, fuzz_app: FastAPI, leak_watch: LeakWatch
) -> None:
    """Each id parameter of the document, given each other spelling of an id that
    exists (the caller's own): 422 naming the parameter, the spelling not echoed, no
    secret answered or logged, whatever the operation's body."""
    operations = _id_operations()
    assert len(operations) >= 14, operations  # the issue counted 14 routes with a 500
    headers = {"Authorization": f"Bearer {world.tokens[-1]}"}
    with TestClient(fuzz_app, raise_server_exceptions=False) as client:
        for method, template, in_path, in_query in operations:
            for name in [*in_path, *in_query]:
                for value in spellings(world.own[name][0]):
                    path = template
                    for other in in_path:
                        filled = value if other == name else world.own[other][0]
                        path = path.replace("{" + other + "}", quote(filled, safe=""))
                    query = {name: value} if name in in_query else None
                    response = client.request(method, path, params=query, headers=headers)
                    assert_nothing_leaked(world, leak_watch, response.text, response.status_code)
                    assert response.status_code == 422, (method, template, value[:60])
                    fields = {f["field"]: f["reason"] for f in response.json()["error"]["fields"]}
                    assert fields.get(name) == UUID_REASON, (method, template, fields)
                    assert value not in response.text, "the spelling was echoed"


@pytest.mark.parametrize(("method", "template", "fields"), EXTRA_ROUTES)
def test_routes_outside_the_document_answer_no_5xx_and_leak_nothing(
    world: World, fuzz_app: FastAPI, leak_watch: LeakWatch, method: str, template: str,
    fields: tuple[str, ...],
) -> None:  # fmt: skip
    """The harness's checks on routes the document does not list, with every token and
    every id (real, the other tenant's, each spelling) in their paths and fields."""
    ids = [*world.own["job_id"], *world.rival["job_id"]]
    values = [*ids, *(s for i in ids[:1] for s in spellings(i))]
    with TestClient(fuzz_app, raise_server_exceptions=False) as client:
        for token in [*world.tokens, None, BOGUS]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            for value in values:
                path = template.replace("{job_id}", quote(value, safe="")).replace(
                    "{run_id}", quote(world.own["run_id"][0], safe="")
                )
                query = dict.fromkeys(fields, value)
                response = client.request(
                    method, path, params=query, headers=headers, follow_redirects=False
                )
                assert_nothing_leaked(world, leak_watch, response.text, response.status_code)
