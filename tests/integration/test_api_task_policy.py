"""Command tasks are the operator's decision, and secrets a job carries are write-only
(issue 7, items 1 and 3), through the real API on the real PostgreSQL.

The issue's reproduction: a token with `read` and `write` only created a job whose
command printed `$HOME/.cronfleet/stack.env`. Now such a job is refused with 403 and
nothing is written, unless the token has the `command` scope and the operator's task
policy file allows that executable for the tenant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from kit.api.app import create_app
from kit.core.redaction import MASK
from kit.settings import cronfleet_home, load_settings
from kit.store.schema import jobs

pytestmark = pytest.mark.integration

Headers = Callable[..., dict[str, str]]
Counts = Callable[[], dict[str, int]]
REPRO = ["sh", "-c", "cat $HOME/.cronfleet/stack.env >&2; exit 1"]
POLICY = """
[tenants.acme]
commands = ["/usr/local/bin/backup", "/bin/sh", "/bin/bash"]
run_as = "nobody"
cwd = ["/srv/acme"]
env = ["APP_*", "TOKEN", "MODE", "B*", "S*", "P*", "G*"]

[tenants.other]
http_allow_hosts = ["10.0.0.0/8"]
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.toml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def api(db_url: str, engine: Engine, policy_file: Path) -> Iterator[TestClient]:
    settings = load_settings(database_url=db_url, task_policy_file=str(policy_file))
    with TestClient(create_app(settings, engine)) as client:
        yield client


def job(argv: list[str], name: str = "cmd", **task: Any) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": {"every_s": 300},
        "task": {"type": "command", "argv": argv, **task},
    }


def refused(response: Any) -> dict[str, str]:
    assert response.status_code == 403, response.text
    body = response.json()["error"]
    assert body["code"] == "forbidden"
    return {f["field"]: f["reason"] for f in body["fields"]}


def test_the_issues_reproduction_is_refused_and_writes_nothing(
    api: TestClient, auth: Headers, row_counts: Counts
) -> None:
    headers = auth(scopes=["read", "write"])
    before = row_counts()
    response = api.post("/v1/jobs", json=job(REPRO), headers=headers)
    assert "'command' scope" in refused(response)["task.type"]
    assert row_counts() == before


@pytest.mark.parametrize("scopes", [["write"], ["admin"], ["read", "write", "admin"]])
def test_without_the_command_scope_no_command_job_is_written(
    api: TestClient, auth: Headers, row_counts: Counts, scopes: list[str]
) -> None:
    headers = auth(scopes=scopes)
    before = row_counts()
    response = api.post("/v1/jobs", json=job(["/bin/sh", "-c", "true"]), headers=headers)
    assert "task.type" in refused(response)
    assert row_counts() == before


def test_the_operator_decides_per_tenant_and_per_executable(
    api: TestClient, auth: Headers, row_counts: Counts
) -> None:
    scopes = ["read", "write", "command"]
    other_headers, acme = auth("other", scopes), auth("acme", scopes)
    before = row_counts()
    other = api.post("/v1/jobs", json=job(["/bin/sh"]), headers=other_headers)
    assert "has not allowed command tasks for tenant 'other'" in refused(other)["task.type"]
    for argv0 in ("/bin/cat", "sh", "/usr/bin/sh"):
        response = api.post("/v1/jobs", json=job([argv0, "x"]), headers=acme)
        assert "is not an executable the operator allowed" in refused(response)["task.argv[0]"]
    assert row_counts() == before
    ok = api.post("/v1/jobs", json=job(["/usr/local/bin/backup", "--all"]), headers=acme)
    assert ok.status_code == 201, ok.text


def test_batch_and_edit_are_checked_too(api: TestClient, auth: Headers, row_counts: Counts) -> None:
    writer = auth(scopes=["read", "write"])
    before = row_counts()
    batch = {"jobs": [job(["/bin/sh"], "a"), {**job([]), "name": "b", "task": {"type": "noop"}}]}
    problems = refused(api.post("/v1/jobs:batch", json=batch, headers=writer))
    assert list(problems) == ["jobs[0].task.type"]
    assert row_counts() == before
    created = api.post("/v1/jobs", json={**job([]), "task": {"type": "noop"}}, headers=writer)
    job_id = created.json()["job_id"]
    edit = {"task": {"type": "command", "argv": ["/bin/sh", "-c", "id"]}}
    assert "task.type" in refused(api.patch(f"/v1/jobs/{job_id}", json=edit, headers=writer))
    assert api.get(f"/v1/jobs/{job_id}", headers=writer).json()["task"] == {"type": "noop"}
    commander = auth(scopes=["read", "write", "command"])
    edited = api.patch(f"/v1/jobs/{job_id}", json=edit, headers=commander)
    assert edited.status_code == 200, edited.text


def test_a_withdrawn_permission_refuses_new_command_jobs(
    api: TestClient, auth: Headers, policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kit.tasks.policy.RECHECK_S", 0.0)
    acme = auth(scopes=["read", "write", "command"])
    assert api.post("/v1/jobs", json=job(["/bin/sh"], "a"), headers=acme).status_code == 201
    policy_file.write_text("[tenants.acme]\n")
    response = api.post("/v1/jobs", json=job(["/bin/sh"], "b"), headers=acme)
    assert "has not allowed" in refused(response)["task.type"]


def test_no_api_route_changes_the_task_policy(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if "polic" in p or "tenant" in p or "token" in p]


def test_secret_headers_and_env_are_write_only(
    api: TestClient, auth: Headers, engine: Engine
) -> None:
    headers = auth(scopes=["read", "write", "command"])
    http = {
        "name": "hook",
        "schedule": {"every_s": 300},
        "task": {
            "type": "http",
            "url": "https://example.org/hook",
            "method": "POST",
            "headers": {"Authorization": "Bearer tok-1234567", "X-Key": "k-7654321", "X-A": "1"},
            "secret_headers": ["x-key"],
        },
    }
    created = api.post("/v1/jobs", json=http, headers={**headers, "Idempotency-Key": "h1"})
    assert created.status_code == 201, created.text
    shown = created.json()["task"]["headers"]
    assert shown == {"Authorization": MASK, "X-Key": MASK, "X-A": "1"}
    job_id = created.json()["job_id"]
    for answer in (
        api.get(f"/v1/jobs/{job_id}", headers=headers),
        api.post("/v1/jobs", json=http, headers={**headers, "Idempotency-Key": "h1"}),
        api.patch(f"/v1/jobs/{job_id}", json={"priority": "high"}, headers=headers),
    ):
        assert answer.status_code in (200, 201), answer.text
        assert "tok-1234567" not in answer.text and "k-7654321" not in answer.text
    with engine.connect() as conn:
        stored = conn.execute(select(jobs.c.task_spec).where(jobs.c.job_id == job_id)).scalar_one()
    assert stored["headers"]["Authorization"] == "Bearer tok-1234567"  # kept for the task

    # Sending back what GET showed is refused, naming the header: nothing is overwritten.
    echo = {"task": created.json()["task"]}
    response = api.patch(f"/v1/jobs/{job_id}", json=echo, headers=headers)
    assert response.status_code == 422
    fields = {f["field"] for f in response.json()["error"]["fields"]}
    assert fields & {"task.headers.Authorization", "task.headers.X-Key"}, fields

    command = job(
        ["/bin/sh", "-c", "true"],
        "c",
        env={"TOKEN": "env-secret-1", "MODE": "x"},
        secret_env=["TOKEN"],
    )
    made = api.post("/v1/jobs", json=command, headers=headers)
    assert made.status_code == 201, made.text
    assert made.json()["task"]["env"] == {"TOKEN": MASK, "MODE": "x"}


@pytest.mark.parametrize(
    ("task", "field"),
    [
        ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "task.env.LD_PRELOAD"),
        ({"env": {"CRONFLEET_DATABASE_URL": "x"}}, "task.env.CRONFLEET_DATABASE_URL"),
        ({"env": {"BASH_ENV": "$(id)"}}, "task.env.BASH_ENV"),
        ({"env": {"SHELLOPTS": "xtrace", "PS4": "$(id)"}}, "task.env.SHELLOPTS"),
        ({"env": {"GLIBC_TUNABLES": "glibc.malloc.check=3"}}, "task.env.GLIBC_TUNABLES"),
        ({"env": {"PATH": "/tmp"}}, "task.env.PATH"),
        ({"env": {"BASH_FUNC_ls%%": "() { id; }"}}, "task.env.BASH_FUNC_ls%%"),
        ({"cwd": "relative/dir"}, "task.cwd"),
        ({"cwd": "/srv/acme/../../root"}, "task.cwd"),
        ({"env": {"A": "1"}, "secret_env": ["B"]}, "task.secret_env[0]"),
    ],
)
def test_reserved_or_unknown_env_names_are_422(
    api: TestClient, auth: Headers, row_counts: Counts, task: dict, field: str
) -> None:
    """Names that make a shell, an interpreter or the loader run code are refused for
    every tenant, even one whose allow-list (`B*`, `S*`, `P*`, `G*`) would match them."""
    headers = auth(scopes=["read", "write", "command"])
    before = row_counts()
    response = api.post("/v1/jobs", json=job(["/bin/bash", "-c", "true"], **task), headers=headers)
    assert response.status_code == 422, response.text
    assert field in {f["field"] for f in response.json()["error"]["fields"]}
    assert row_counts() == before


@pytest.mark.parametrize("cwd", ["{home}", "{home}/stack.env", "/no/such/dir", "/", "/srv"])
def test_a_cwd_the_policy_does_not_allow_is_403_in_the_same_words_whatever_is_there(
    api: TestClient, auth: Headers, row_counts: Counts, cwd: str
) -> None:
    """cwd = $CRONFLEET_HOME listed its files, and the errors told which paths exist:
    now a cwd outside the operator's directories is refused before anything is written,
    by a comparison of text that never looks at the disk."""
    acme = auth(scopes=["read", "write", "command"])
    before = row_counts()
    cwd = cwd.format(home=cronfleet_home())  # the stack's home, where stack.env lives
    response = api.post("/v1/jobs", json=job(["/bin/sh", "-c", "ls"], cwd=cwd), headers=acme)
    assert refused(response) == {
        "task.cwd": "is not a directory the operator allowed for tenant 'acme' (allowed: /srv/acme)"
    }
    assert row_counts() == before
    for name, allowed in (("top", "/srv/acme"), ("below", "/srv/acme/reports")):
        ok = api.post("/v1/jobs", json=job(["/bin/sh"], name, cwd=allowed), headers=acme)
        assert ok.status_code == 201, ok.text


def test_an_env_name_outside_the_operators_list_is_403(
    api: TestClient, auth: Headers, row_counts: Counts
) -> None:
    acme = auth(scopes=["read", "write", "command"])
    before = row_counts()
    task = {"env": {"APP_MODE": "x", "LC_ALL": "C"}}
    response = api.post("/v1/jobs", json=job(["/bin/sh"], **task), headers=acme)
    assert refused(response) == {
        "task.env.LC_ALL": "is not a name the operator allowed tenant 'acme' to set "
        "(allowed: APP_*, B*, G*, MODE, P*, S*, TOKEN)"
    }
    batch = {"jobs": [job(["/bin/sh"], "a"), job(["/bin/sh"], "b", env={"OTHER": "1"})]}
    assert list(refused(api.post("/v1/jobs:batch", json=batch, headers=acme))) == [
        "jobs[1].task.env.OTHER"
    ]
    assert row_counts() == before
    made = api.post("/v1/jobs", json=job(["/bin/sh"], env={"APP_MODE": "x"}), headers=acme)
    assert made.status_code == 201, made.text
    edit = {"task": {"type": "command", "argv": ["/bin/sh"], "env": {"HOSTNAME": "x"}}}
    edited = api.patch(f"/v1/jobs/{made.json()['job_id']}", json=edit, headers=acme)
    assert list(refused(edited)) == ["task.env.HOSTNAME"]
    shown = api.get(f"/v1/jobs/{made.json()['job_id']}", headers=acme).json()["task"]
    assert shown["env"] == {"APP_MODE": "x"}
