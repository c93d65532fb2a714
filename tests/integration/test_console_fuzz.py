"""The console's inputs, fuzzed: the console is outside the OpenAPI document, so the API's
fuzz test never reaches it. Every console route and form field gets values that the API
would refuse (superscript and Arabic digits, 5,000-digit numbers, 50,000 nested `[`,
`\\u0000`, lone surrogates, NUL, ids PostgreSQL does not take) as a tenant whose token
has every scope. No answer may be a 5xx; a refused input is a 4xx naming its field on
the page, and nothing is written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.settings import Settings
from kit.store.tokens import token_create
from tests.integration.console_client import csrf_of, login
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("CRONFLEET_FUZZ_EXAMPLES", "40")) * 4
ALL_SCOPES = ("read", "write", "admin", "command")

# What the issue reported and what the API refuses, as text a form or a query
# string carries.
DEEP = "[" * 50_000
LONG_NUMBER = "9" * 5_000
SPELLINGS = (
    "²",
    "١٢",
    "1e400",
    "NaN",
    "-0",
    LONG_NUMBER,
    DEEP,
    '"\\u0000"',
    '"\\ud800"',
    "a\x00b",
    "\x00",
    "\ud800",
    "\u202e",
    " ",
    "",
)
# Ids of the path: PostgreSQL's uuid type refuses what Python's uuid.UUID() accepts.
ID_SPELLINGS = (
    "urn:uuid:f0d2c3a4-1b2c-4d5e-8f90-a1b2c3d4e5f6",
    "{f0d2c3a4-1b2c-4d5e-8f90-a1b2c3d4e5f6}",
    "f0d2c3a41b2c4d5e8f90a1b2c3d4e5f6",
    "f0d2c3a4-1b2c4d5e-8f90-a1b2c3d4e5f6",
    "nope",
    "%00",
)


def json_with(value: str) -> str:
    """A task JSON the model accepts, carrying `value` where nothing else checks it."""
    task = {"type": "http", "url": "https://example.org/hook", "method": "POST", "body": "x"}
    return json.dumps(task).replace('"x"', value)


JSON_SPELLINGS = (
    DEEP,
    LONG_NUMBER,
    json_with('"\\u0000"'),
    json_with('"\\ud800"'),
    json_with("1e400"),
    json_with(LONG_NUMBER),
    '{"max_attempts": ' + LONG_NUMBER + "}",
    '{"kind": "run_once", "deadline_s": NaN}',
)


@dataclass
class Console:
    client: TestClient
    engine: Engine
    job: str
    run: str

    def csrf(self) -> str:
        return csrf_of(self.client.get("/console/jobs").text)

    def edit_form(self) -> dict[str, str]:
        """The edit form as the page renders it (its `orig_` fields and values)."""
        html = self.client.get(f"/console/jobs/{self.job}").text
        fields = dict(re.findall(r'name="(orig_[a-z_]+)" value="([^"]*)"', html))
        original = {k.removeprefix("orig_"): _unescape(v) for k, v in fields.items()}
        return {**{f"orig_{k}": v for k, v in original.items()}, **original}


def _unescape(html_value: str) -> str:
    return html_value.replace("&#34;", '"').replace("&#39;", "'").replace("&amp;", "&")


@pytest.fixture
def console(settings: Settings, engine: Engine) -> Iterator[Console]:
    job = make_job(engine)
    run = make_run(engine, job, status="dead")
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO dead_letters (run_id, job_id, tenant) VALUES (:r, :j, 'acme')"),
            {"r": run, "j": job},
        )
    with TestClient(create_app(settings, engine), raise_server_exceptions=False) as client:
        login(client, token_create(engine, "acme", ALL_SCOPES).token)
        yield Console(client, engine, job, run)


def task_spec(engine: Engine, job: str) -> dict:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT task_spec FROM jobs WHERE job_id = :j"), {"j": job}
        ).scalar_one()


# -- the reproductions ------------------------------------------------------------


@pytest.mark.parametrize("every_s", ["²", "١٢", LONG_NUMBER, "1e400", "-5"])
def test_the_preview_refuses_what_is_not_a_whole_number(console: Console, every_s: str) -> None:
    got = console.client.get("/console/preview", params={"every_s": every_s})
    assert got.status_code == 422, got.text[:300]
    assert "every_s" in got.text


@pytest.mark.parametrize("field", ["task", "retry", "misfire"])
@pytest.mark.parametrize("value", JSON_SPELLINGS, ids=lambda v: v[:40])
def test_the_edit_forms_json_fields_go_through_the_strict_parser(
    console: Console, field: str, value: str
) -> None:
    before = task_spec(console.engine, console.job)
    form = {**console.edit_form(), field: value, "csrf": console.csrf()}
    got = console.client.post(f"/console/jobs/{console.job}/edit", data=form)
    assert got.status_code == 422, got.text[:300]
    problems = re.search(r'<ul class="error" role="alert">(.*?)</ul>', got.text, re.S)
    assert problems and f"<b>{field}" in problems.group(1), got.text[:2000]
    assert task_spec(console.engine, console.job) == before  # nothing written


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "a\x00b"),
        ("timeout_s", "²"),
        ("timeout_s", LONG_NUMBER),
        ("jitter_s", "١"),
        ("schedule_every_s", "²"),
        ("schedule_every_s", LONG_NUMBER),
        ("schedule_cron", "0 0 * * *\x00"),
    ],
)
def test_the_edit_forms_other_fields_are_checked_as_the_api_checks_them(
    console: Console, field: str, value: str
) -> None:
    form = {**console.edit_form(), field: value, "csrf": console.csrf()}
    if field == "schedule_cron":
        form["schedule_every_s"] = ""
    got = console.client.post(f"/console/jobs/{console.job}/edit", data=form)
    assert got.status_code == 422, got.text[:300]
    named = field.replace("schedule_", "schedule.")
    assert f"<b>{named}" in got.text, got.text[:2000]


def test_a_filter_the_api_refuses_is_a_422_naming_it(console: Console) -> None:
    got = console.client.get("/console/jobs", params={"priority": "urgent"})
    assert got.status_code == 422 and "priority: must be one of" in got.text
    got = console.client.get("/console/jobs", params={"name_prefix": "a\x00"})
    assert got.status_code == 422 and "name_prefix" in got.text


# -- the fuzz --------------------------------------------------------------------------------

_text = st.one_of(
    st.sampled_from(SPELLINGS),
    st.text(max_size=40),
    st.text(st.characters(codec="utf-8"), max_size=400),
    st.from_regex(r"-?[0-9]{1,25}", fullmatch=True),
)
_json_text = st.one_of(
    st.sampled_from(JSON_SPELLINGS),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=12,
    ).map(json.dumps),
    _text,
)

GET_PAGES = {
    "/console": (),
    "/console/login": ("next",),
    "/console/jobs": ("name_prefix", "paused", "task_type", "priority", "last_status", "cursor"),
    "/console/jobs/{job}": (),
    "/console/jobs/{job}/explain": ("from", "to"),
    "/console/dead-letters": ("cursor",),
    "/console/fleet": (),
    "/console/preview": ("cron", "timezone", "every_s", "anchor", "at"),
    "/console/runs/{run}": (),
    "/console/jobs/new": (),
    "/console/now": (),
    "/console/queues": (),
    "/console/charts": ("range",),
}
POST_ACTIONS = {
    "/console/jobs/{job}/pause": ("next",),
    "/console/jobs/{job}/resume": ("next",),
    "/console/jobs/{job}/run-now": ("next",),
    "/console/runs/{run}/cancel": ("next",),
    "/console/dead-letters/{run}/replay": ("next",),
    "/console/jobs/{job}/edit": (
        "name",
        "priority",
        "overlap",
        "timeout_s",
        "jitter_s",
        "pause_after_dead",
        "retry",
        "misfire",
        "task",
        "schedule_cron",
        "schedule_timezone",
        "schedule_every_s",
        "schedule_anchor",
        "schedule_at",
        "notify",
    ),
    "/console/login": ("token", "next"),
    "/console/jobs/new": (
        "name",
        "priority",
        "timeout_s",
        "pause_after_dead",
        "paused",
        "task",
        "notify",
        "schedule_cron",
        "schedule_timezone",
        "schedule_every_s",
        "schedule_anchor",
        "schedule_at",
    ),
    "/console/jobs/{job}/backfill": ("from", "to"),
    "/console/now/cancel": ("run_id", "next"),
    "/console/now/replay": ("run_id", "next"),
}
JSON_FIELDS = {"retry", "misfire", "task", "notify"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _q(value: str) -> str:
    """Percent-encoded as a hostile client may send it: a lone surrogate as its UTF-8-ish
    bytes, control characters as they are."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def _encoded(fields: dict[str, str]) -> str:
    return "&".join(f"{_q(k)}={_q(v)}" for k, v in fields.items())


def _path(template: str, console: Console, own: bool, spelled: str) -> str:
    job, run = (console.job, console.run) if own else (_q(spelled), _q(spelled))
    return template.replace("{job}", job).replace("{run}", run)


@st.composite
def fields_for(draw: st.DrawFn, names: tuple[str, ...]) -> dict[str, str]:
    chosen = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    return {n: draw(_json_text if n in JSON_FIELDS else _text) for n in chosen}


def test_odd_ids_in_every_path_are_404_pages(console: Console) -> None:
    csrf = console.csrf()
    for spelling in ID_SPELLINGS:
        for template in (*GET_PAGES, *POST_ACTIONS):
            if "{" not in template:
                continue
            path = _path(template, console, False, spelling)
            if template in POST_ACTIONS:
                got = console.client.post(path, data={"csrf": csrf}, follow_redirects=False)
            else:
                got = console.client.get(path)
            assert got.status_code == 404, (template, spelling, got.text[:300])


def test_no_console_input_answers_a_5xx(console: Console) -> None:
    """Every route, every field, the issue's spellings among generated text."""
    csrf = console.csrf()
    edit_form = console.edit_form()
    seen: set[tuple[str, str]] = set()
    statuses: set[int] = set()

    @hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        method=st.sampled_from(["GET", "POST"]),
        data=st.data(),
        own=st.booleans(),
        spelled=st.sampled_from(ID_SPELLINGS) | st.text(max_size=40),
    )
    def one(method: str, data: st.DataObject, own: bool, spelled: str) -> None:
        routes = GET_PAGES if method == "GET" else POST_ACTIONS
        template = data.draw(st.sampled_from(sorted(routes)))
        path = _path(template, console, own, spelled)
        fields = data.draw(fields_for(routes[template]))
        if method == "GET":
            query = _encoded(fields)
            assume(len(path) + len(query) < 60_000)  # what an HTTP client sends in a URL
            got = console.client.get(f"{path}?{query}" if query else path)
        else:
            base = dict(edit_form) if template.endswith("/edit") else {}
            form = {**base, "csrf": csrf, **fields}
            got = console.client.post(
                path, content=_encoded(form), headers=FORM, follow_redirects=False
            )
        seen.add((method, template))
        statuses.add(got.status_code)
        assert got.status_code < 500, (method, path, fields, got.text[:500])

    one()
    assert len(seen) >= (len(GET_PAGES) + len(POST_ACTIONS)) // 2, seen
    assert {200, 303, 404, 422} <= statuses, statuses  # past the session and CSRF checks
