"""What a task type declares (`TaskType`): its spec, its runner, whether it runs inline.

The spec is a pydantic model (`TaskSpec`) with a `type: Literal["<name>"]` field: the
API validates a job's `task` with it (its 422s name the field), and its JSON schema is
the type's entry in the OpenAPI document. Unknown fields are refused and nothing is
coerced, as for every body of the API. A FieldError a validator raises names the field
from the task (`env.A`); the API puts the task's place in front (`jobs[3].task.env.A`).

What a tenant may run and reach is never part of a spec: the operator's task policy
decides it for the tenant (kit.tasks.policy, kit.tasks.egress) and the runner is given
it in the RunContext.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict

from kit.core.errors import FieldError
from kit.core.redaction import MASK
from kit.tasks.context import RunContext, TaskResult

# One attempt of a run, on a worker thread, under the tenant's policy (kit.tasks.policy).
Runner = Callable[[Mapping[str, Any], RunContext], TaskResult]
# A task with no effect and no wait, run where the worker starts runs: no context, no
# policy, no thread.
InlineRunner = Callable[[Mapping[str, Any]], TaskResult]
# One attempt as a coroutine on the worker's task loop (kit.worker.task_loop): a task that
# mostly waits on the network, thousands at once without a thread each.
AsyncRunner = Callable[[Mapping[str, Any], RunContext], Awaitable[TaskResult]]


class TaskSpec(BaseModel):
    """The base of a task type's spec: unknown fields refused, nothing coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)


@dataclass(frozen=True)
class TaskType:
    """A task type, as kit.tasks.registry lists it for the API, the console, the jobs
    list's filter and the worker."""

    name: str
    spec: type[TaskSpec]  # the API's request model: validation, field errors, OpenAPI
    run: Runner
    # Set only for a type with no effect and no wait (noop): the worker then runs it on
    # its hold thread, many at a time, without a run context or the task policy.
    inline: InlineRunner | None = None
    # Set for a type whose attempt is a coroutine: the worker runs it on its task loop
    # (`run` stays, for callers without a loop).
    run_async: AsyncRunner | None = None

    def __post_init__(self) -> None:
        field = self.spec.model_fields.get("type")
        annotation = field.annotation if field is not None else None
        if get_origin(annotation) is not Literal or get_args(annotation) != (self.name,):
            raise ValueError(
                f"task type {self.name!r}: {self.spec.__name__}.type must be "
                f"Literal[{self.name!r}] (the API tells the types apart by it)"
            )


# -- checks the specs share: secret values are write-only ---------------------------------


def no_mask(values: dict[str, str], where: str) -> None:
    """A value shown as MASK sent back as is (a client round-tripping a GET) is refused."""
    for name, value in values.items():
        if value == MASK:
            raise FieldError(
                f"{where}.{name}",
                f"is {MASK!r}, how a secret value is shown; send the value itself",
            )


def names_present(names: list[str], values: dict[str, str], where: str, fold: bool) -> None:
    """Every name of `secret_<where>` is an entry of `<where>` (case-folded for headers)."""
    present = {n.lower() if fold else n for n in values}
    for index, name in enumerate(names):
        if (name.lower() if fold else name) not in present:
            raise FieldError(f"secret_{where}[{index}]", f"names no entry of task.{where}")
