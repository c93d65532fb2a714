"""The task registry is the one list of task types: the API's request models, OpenAPI and
error messages, the console, the jobs list's filter and the worker all read it.

A new type is one module (`TASK = TaskType(...)`); the subprocess test registers a
throwaway one before the API is imported and sees every consumer take it up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import ValidationError

from kit.api import errors, models
from kit.api import jobs_list as api_jobs_list
from kit.api.app import create_app
from kit.api.console import edit, pages
from kit.core.errors import FieldError
from kit.settings import Settings
from kit.store.jobs_list import JobFilter
from kit.tasks import (
    INLINE,
    RUNNERS,
    RunContext,
    TaskResult,
    TaskSpec,
    TaskType,
    execute,
    registry,
)
from kit.worker.worker import task_executor

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "postgresql+psycopg://nobody@127.0.0.1:1/none"  # never connected
NAMES = ("http", "command", "noop", "sleep")


def _openapi() -> dict[str, Any]:
    return create_app(Settings(database_url=NOWHERE)).openapi()


def test_the_registry_lists_the_types_in_the_apis_order() -> None:
    assert registry.names() == NAMES
    assert tuple(RUNNERS) == NAMES
    assert set(INLINE) == {"noop"}


def test_every_consumer_reads_the_registry() -> None:
    specs = tuple(t.spec for t in registry.task_types())
    job_in_task = models.JobIn.model_fields["task"].annotation
    assert typing.get_args(job_in_task) == specs
    assert errors.TASK_TYPES == api_jobs_list.TASK_TYPES == registry.names()
    assert pages.TASK_TYPES == edit.TASK_TYPES == registry.names()
    assert task_executor().inline_tasks == frozenset(INLINE)  # type: ignore[attr-defined]
    task = _openapi()["components"]["schemas"]["JobIn"]["properties"]["task"]
    assert [ref["$ref"].rsplit("/", 1)[1] for ref in task["oneOf"]] == [s.__name__ for s in specs]
    assert set(task["discriminator"]["mapping"]) == set(NAMES)


def test_an_unknown_type_is_named_with_the_registrys_list() -> None:
    listed = ", ".join(NAMES)
    with pytest.raises(ValidationError) as exc:
        models.JobIn.model_validate(
            {"name": "n", "schedule": {"every_s": 60}, "task": {"type": "x"}}
        )
    problems = [errors._problem(e) for e in exc.value.errors()]
    assert problems == [("task", f"must be one of {listed}")]
    assert (
        execute({"type": "x"}, RunContext("r", 1, 1.0)).error
        == f"task.type: must be one of {listed}"
    )
    with pytest.raises(FieldError) as refused:
        JobFilter(task_type="x", task_types=registry.names()).check()
    assert refused.value.reason == f"must be one of {listed}"
    JobFilter(task_type="sleep", task_types=registry.names()).check()


def test_a_type_whose_spec_does_not_carry_its_name_is_refused() -> None:
    class Wrong(TaskSpec):
        type: Literal["other"]

    class Untagged(TaskSpec):
        seconds: int

    def run(spec: Any, ctx: RunContext) -> TaskResult:
        return TaskResult(True)

    with pytest.raises(ValueError, match=r"Wrong.type must be Literal\['mine'\]"):
        TaskType("mine", Wrong, run)
    with pytest.raises(ValueError, match=r"Untagged.type must be Literal\['mine'\]"):
        TaskType("mine", Untagged, run)


def test_register_refuses_a_taken_name_and_a_late_registration() -> None:
    with pytest.raises(ValueError, match="'noop' is already registered"):
        registry.register(registry.BUILTIN[2])

    # kit.api is imported above: its models were built from the list, so a type added
    # now would be run by a worker and refused by the API
    class Late(TaskSpec):
        type: Literal["late"]

    with pytest.raises(RuntimeError, match=r"register it before importing kit\.api"):
        registry.register(TaskType("late", Late, lambda spec, ctx: TaskResult(True)))
    assert "late" not in RUNNERS


# A new task type is this much: its spec, its runner (and `inline=` if it has no effect
# and no wait). The subprocess registers it before importing the API, as BUILTIN does.
THROWAWAY = """
from typing import Literal
from pydantic import Field
from kit.tasks import TaskResult, TaskSpec, TaskType
from kit.tasks import registry

class EchoTask(TaskSpec):
    type: Literal["echo"]
    text: str = Field(min_length=1)

def run_echo(spec, ctx):
    return TaskResult(spec["text"] != "fail", None if spec["text"] != "fail" else "echo failed",
                      f"{spec['text']} ({ctx.run_id}, {ctx.tenant})")

registry.register(TaskType("echo", EchoTask, run_echo))
"""

CONSUMERS = """
import json, threading
from pydantic import ValidationError
from kit.api import errors, models
from kit.api import jobs_list as api_jobs_list
from kit.api.app import create_app
from kit.api.console import edit, pages
from kit.api.console.web import templates
from kit.settings import Settings
from kit.store.jobs_list import JobFilter
from kit.worker.worker import task_executor

def problems(body):
    try:
        models.JobIn.model_validate(body)
        return []
    except ValidationError as exc:
        return [list(errors._problem(e)) for e in exc.errors()]

job = {"name": "n", "schedule": {"every_s": 60}}
openapi = create_app(Settings(database_url=%(nowhere)r)).openapi()
schemas = openapi["components"]["schemas"]
source = templates.loader.get_source(templates, "jobs.html")[0]
task_select = source[source.index('<select name="task_type">') :]
task_select = task_select[: task_select.index("</select>")]
form = templates.from_string(task_select).render(query={}, task_types=pages.TASK_TYPES)
JobFilter(task_type="echo", task_types=api_jobs_list.TASK_TYPES).check()
run = task_executor()
print(json.dumps({
    "accepted": problems({**job, "task": {"type": "echo", "text": "hi"}}),
    "missing": problems({**job, "task": {"type": "echo"}}),
    "extra": problems({**job, "task": {"type": "echo", "text": "hi", "shell": "rm"}}),
    "unknown": problems({**job, "task": {"type": "ftp"}}),
    "patched": models.JobPatch.model_validate({"task": {"type": "echo", "text": "x"}}).changes(),
    "openapi": sorted(schemas["JobIn"]["properties"]["task"]["discriminator"]["mapping"]),
    "schema": schemas["EchoTask"]["properties"]["text"],
    "filter": list(api_jobs_list.TASK_TYPES),
    "console": form,
    "console_edit": edit.validated({"task": {"type": "echo"}})[1],
    "inline": sorted(run.inline_tasks),
    "ran": run({"type": "echo", "text": "hi"}, "r-1", 1, 5, threading.Event(), "acme"),
    "failed": run({"type": "echo", "text": "fail"}, "r-2", 1, 5, threading.Event(), "acme"),
}))
"""


def test_a_throwaway_type_is_taken_up_by_every_consumer() -> None:
    script = THROWAWAY + CONSUMERS % {"nowhere": NOWHERE}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["accepted"] == []
    assert seen["missing"] == [["task.text", "is required"]]
    assert seen["extra"] == [["task.shell", "unknown field"]]
    assert seen["unknown"] == [["task", "must be one of http, command, noop, sleep, echo"]]
    assert seen["patched"] == {"task": {"type": "echo", "text": "x"}}
    assert seen["openapi"] == sorted((*NAMES, "echo"))
    # the strict body parser's rule, declared on every string (kit.api.openapi)
    assert seen["schema"] == {
        "minLength": 1,
        "title": "Text",
        "type": "string",
        "pattern": "^[^\\u0000]*$",
    }
    assert seen["filter"] == [*NAMES, "echo"]
    assert "<option >echo</option>" in seen["console"]
    assert seen["console_edit"] == [["task.text", "is required"]]  # the API's words
    assert seen["inline"] == ["noop"]  # echo runs on the pool, under the task policy
    assert seen["ran"] == [True, None, None]  # ok, no error, no output
    assert seen["failed"] == [False, "echo failed", None]
