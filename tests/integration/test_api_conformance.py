"""The OpenAPI document says what the API enforces: schemathesis with **every** check
(not only "no 5xx": a request the document allows is accepted, one it forbids is
refused, a 405 carries `Allow`, a deleted object is gone, auth is not ignored, ...) on
every operation, in its coverage, fuzzing and stateful phases, on the real PostgreSQL
(issue 27).

Some rules cannot be said in JSON Schema (a cron expression's meaning, one field against
another, what the server's clock or settings decide). A request the document allows
and the API refuses for one of those is allowed here, and only then: `ALLOWED` names
each rule by the field and the reason of the API's 422, with why it cannot be declared;
the document's description lists the same (kit.api.openapi.NOT_DECLARED). Any other
refusal of a request the document allows fails the test, as does every other check.

Before this test, the same run found 23 distinct failures: 16 refusals of undeclared
rules, 6 `405` answers with a wrong `Allow`, 1 accepted request the document forbade.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.checks import CheckContext, positive_data_acceptance, use_after_free
from schemathesis.generation.feedback import FeedbackSources
from schemathesis.openapi.checks import RejectedPositiveData
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.settings import Settings, load_settings
from kit.store.tokens import token_create

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("CRONFLEET_CONFORMANCE_EXAMPLES", "25"))
STATEFUL_SCENARIOS = int(os.environ.get("CRONFLEET_CONFORMANCE_SCENARIOS", "15"))
INSTANT_FIELD = r"(^|\.)(from|to|after|at|anchor)$"


@dataclass(frozen=True)
class Allowed:
    field: str  # a regular expression on the 422's field path
    reason: str  # ... and on its reason
    why: str  # why the document cannot declare it


ALLOWED = (
    Allowed(
        r"(^|\.)cron$",
        r"is not a valid cron expression|never fires",
        "what a cron field may say (ranges, steps, names, L, W, #) and whether the "
        "expression ever fires is croniter's to decide; the pattern declares the shape",
    ),
    Allowed(
        r"(^|\.)timezone$",
        r"unknown time zone",
        "the IANA names are the server's tz database, which changes with the host",
    ),
    Allowed(r"(^|\.)retry\.cap_s$", r"must be at least base_s", "one field against another"),
    Allowed(
        r"(^|\.)secret_(headers|env)\[\d+\]$",
        r"names no entry of task\.",
        "a list's items against another object's keys",
    ),
    Allowed(
        r"(^|\.)task\.env\.",
        r".",
        "the names a command's environment may not set are the kit's and the operator's "
        "policy (kit.core.task_policy), not a fixed pattern of the document",
    ),
    Allowed(
        r".",
        r"digits; numbers of at most 100 digits",
        "JSON Schema sees a number's value, not how many digits it was written with "
        "(1e300 is accepted, 101 written digits are not)",
    ),
    Allowed(
        INSTANT_FIELD,
        r"is not an ISO 8601 time|must be between",
        "a 29 February of a year that is not a leap year, and an instant whose offset "
        "carries it past the end of its range: the pattern declares years, months, days",
    ),
    Allowed(r"(^|\.)to$", r"must be after from", "one field against another"),
    Allowed(
        r"^cursor$",
        r"is not a cursor returned by this API",
        "a cursor is opaque: whether a string of its alphabet is one the API gave out",
    ),
    Allowed(
        r"^schedule$",
        r"give exactly one of 'cron', 'every_s' or 'at'",
        "exactly one of three query parameters",
    ),
    Allowed(
        r"^(timezone|anchor|cron|every_s|at)$",
        r"not allowed with '(cron|every_s|at)'",
        "which query parameters go together (`timezone` with `cron`, `anchor` with `every_s`)",
    ),
    Allowed(
        r"^to$",
        r"is in the future; a backfill ends at most now|the range owes more than",
        "the server's clock, and the operator's limit of fires a backfill may owe",
    ),
    Allowed(r"^from$", r"run history is kept", "the server's clock and the operator's retention"),
    Allowed(
        r"^from$", r"explain looks over at most", "a span between two fields (366 days at most)"
    ),
    Allowed(
        r"(^|\.)schedule\.at$",
        r"s in the past; at most",
        "the server's clock and the operator's grace for one-off times",
    ),
    Allowed(
        r"(^|\.)(task|payload|result)$",
        r"bytes of JSON; the limit is",
        "the operator's size limit of a task or a payload, in bytes of JSON",
    ),
    Allowed(r".", r"nests deeper than", "the depth of a free JSON value"),
    Allowed(
        r"^jobs\[\d+\]\.name$",
        r"duplicates jobs\[\d+\]\.name",
        "unique names across the items of a list",
    ),
)


def allowed_refusal(response: Any) -> bool:
    """A 422 every problem of which is one of ALLOWED."""
    if response.status_code != 422:
        return False
    try:
        fields = response.json()["error"]["fields"]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(fields) and all(
        any(re.search(a.field, f["field"]) and re.search(a.reason, f["reason"]) for a in ALLOWED)
        for f in fields
    )


def positive_data_acceptance_but_allowed(
    ctx: CheckContext, response: Any, case: Any
) -> bool | None:
    """schemathesis' own check, but a refusal for a rule of ALLOWED passes."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if allowed_refusal(response):
            return None
        raise


# A deleted job's audit log stays readable: who deleted it is its last entry
# (docs/operate.md, "the audit log"). Every other read after a delete must be a 404.
KEPT_AFTER_DELETE = re.compile(r"^/v1/jobs/\{job_id\}/audit$")


def use_after_free_but_kept(ctx: CheckContext, response: Any, case: Any) -> bool | None:
    """schemathesis' own check, but for what the API keeps after a delete on purpose."""
    if KEPT_AFTER_DELETE.match(case.path):
        return None
    return use_after_free(ctx, response, case)


# The document is the app's own: read at import; each test points the app at its own
# fresh database (as tests/integration/test_api_fuzz.py does, for the same reason).
APP = create_app(load_settings())
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=EXAMPLES
)
schema.config.phases.update(phases=["examples", "coverage", "fuzzing", "stateful"])


@pytest.fixture
def conformance_app(settings: Settings, engine: Engine) -> Iterator[FastAPI]:
    fresh = create_app(settings, engine)
    saved = dict(APP.state._state)
    APP.state._state.update(fresh.state._state)
    yield APP
    APP.state._state.clear()
    APP.state._state.update(saved)


@pytest.fixture
def headers(conformance_app: FastAPI, engine: Engine) -> dict[str, str]:
    token = token_create(engine, "acme", ("read", "write", "admin", "command")).token
    return {"Authorization": f"Bearer {token}"}


def with_token(case: Any, headers: dict[str, str]) -> dict[str, str]:
    """The case's headers with a real token in place of the one schemathesis drew, unless
    the case is about its headers being wrong (a missing or malformed Authorization must
    reach the API as drawn: it is what is tested)."""
    sent = dict(case.headers or {})
    components = case.meta.components if case.meta is not None else {}
    header = next((c for loc, c in components.items() if str(loc.value) == "header"), None)
    if header is not None and header.mode == GenerationMode.NEGATIVE:
        return sent
    return {**sent, **headers}


def _check(case: Any, response: Any, headers: dict[str, str]) -> None:
    case.validate_response(
        response,
        excluded_checks=[positive_data_acceptance, use_after_free],
        additional_checks=[positive_data_acceptance_but_allowed, use_after_free_but_kept],
        headers=headers,
    )


@schema.parametrize()
@hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_every_check_passes_on_every_operation(case: Any, headers: dict[str, str]) -> None:
    sent = with_token(case, headers)
    _check(case, case.call(headers=sent), sent)


# What a scenario made, removed before the next: each starts from the same empty tenant,
# so the same requests get the same answers (hypothesis replays choices and calls a run
# whose answers changed flaky: a job name taken by an earlier scenario is a 409).
SCENARIO_TABLES = ("dead_letters", "runs", "triggers", "job_audit", "idempotency_keys",
                   "jobs", "queue_tasks")  # fmt: skip


def test_every_check_passes_in_stateful_scenarios(headers: dict[str, str], engine: Engine) -> None:
    """Sequences the document's links make (create a job, read it, edit it, run it, ...
    delete it, read it again; enqueue, lease, ack): every check, including use-after-free
    and resource availability, on each step."""
    # no learning from answers between scenarios either (FeedbackSources() is none)
    machine = schema.build_state_machine(feedback=FeedbackSources(), link_calibration=None)

    reached: set[tuple[str, str]] = set()

    class Scenarios(machine):  # type: ignore[misc,valid-type]
        def after_call(self, response: Any, case: Any) -> None:
            super().after_call(response, case)
            if 200 <= response.status_code < 300:
                reached.add((case.method.upper(), case.path))

        def setup(self) -> None:
            with engine.begin() as conn:
                conn.execute(text(f"TRUNCATE {', '.join(SCENARIO_TABLES)} CASCADE"))

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": with_token(case, headers)}

        def validate_response(
            self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            case.validate_response(
                response,
                excluded_checks=[positive_data_acceptance, use_after_free],
                additional_checks=[positive_data_acceptance_but_allowed, use_after_free_but_kept],
                headers=with_token(case, headers),
                recorder=getattr(self, "recorder", None),
            )

    Scenarios.run(
        settings=hypothesis_settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=8,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
    # the links were followed to real objects: an operation on an id answered a 2xx (a
    # drawn id names nothing: 404)
    assert any("{job_id}" in path for _, path in reached), sorted(reached)


def test_the_allowed_list_is_the_documents() -> None:
    """Each rule the test allows is one the document's description owns up to, and the
    allowed list allows nothing else (a 422 for a declared rule, a 500)."""
    description = APP.openapi()["info"]["description"]
    for phrase in ("croniter", "time zone", "base_s", "secret_headers", "100 digits",
                   "29 February", "cursor", "exactly one of", "retention", "366 days",
                   "grace", "size limit", "64 levels"):  # fmt: skip
        assert phrase in description, phrase

    class Answer:
        def __init__(self, status: int, fields: list[dict[str, str]]) -> None:
            self.status_code = status
            self._body = {"error": {"fields": fields}}

        def json(self) -> Any:
            return self._body

    cron = [{"field": "schedule.cron", "reason": "'x' is not a valid cron expression"}]
    assert allowed_refusal(Answer(422, cron))
    id_refusal = [{"field": "job_id", "reason": "must be a UUID: 8-4-4-4-12 hexadecimal"}]
    assert not allowed_refusal(Answer(422, id_refusal))
    assert not allowed_refusal(Answer(422, [*cron, *id_refusal]))
    assert not allowed_refusal(Answer(500, cron))
    assert not allowed_refusal(Answer(422, []))
