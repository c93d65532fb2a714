"""Request and response bodies of the jobs API.

Unknown fields are refused (extra="forbid"), so a typo or a server-set field such as
`tenant` or `version` is a 422 naming it rather than silently ignored. Schedule, retry
and misfire are validated by the core's own parsers, so the API's messages are the
core's; a FieldError raised here keeps its dotted field (`schedule.cron`).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from functools import reduce
from typing import Annotated, Any, Literal

from fastapi import Response
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, WithJsonSchema, field_validator

from kit.api.declared import (
    MISFIRE_SCHEMA,
    RETRY_SCHEMA,
    SCHEDULE_SCHEMA,
    schedule_input,
    whole_in,
    wholes,
)
from kit.core.dispatch import PriorityTier
from kit.core.errors import FieldError
from kit.core.leases import RunStatus
from kit.core.policies import MisfirePolicy, OverlapPolicy
from kit.core.queue_task import TaskStatus
from kit.core.redaction import redact_task, redact_webhook
from kit.core.retry import RetryPolicy
from kit.core.run_state import RunState
from kit.core.schedule import OneOffSchedule, Schedule, parse_schedule, schedule_to_dict
from kit.core.trigger import TriggerKind
from kit.store.jobs import JobRecord, JobSpec
from kit.store.runs import RunRecord
from kit.tasks import registry
from kit.tasks.http import Webhook

# Fields the server sets; a client that sends one is told so by name.
SERVER_SET_FIELDS = frozenset(
    {"job_id", "tenant", "version", "status", "created_at", "updated_at", "next_fire_at"}
)
MAX_BATCH_JOBS = 5000
# Fields a PATCH may set to null: back to the operator's default, no webhook.
NULLABLE_FIELDS = frozenset({"pause_after_dead", "notify"})


def _one_of(names: type[StrEnum]) -> Any:
    """A core enum's values as a `Literal` type: the API takes and shows plain strings
    (its JSON schema an `enum` of them) and the set is the core's, never restated."""
    return Literal[tuple(m.value for m in names)]


# The closed sets of kit.core (kit.core.vocabulary), as the API's field types.
Priority = _one_of(PriorityTier)
Overlap = _one_of(OverlapPolicy)
RunStatusName = _one_of(RunStatus)
RunStateName = _one_of(RunState)  # a run's status as shown (kit.core.run_state)
RunTrigger = _one_of(TriggerKind)
QueueTaskStatus = _one_of(TaskStatus)
PRIORITIES: tuple[str, ...] = tuple(t.value for t in PriorityTier)
OVERLAPS: tuple[str, ...] = tuple(p.value for p in OverlapPolicy)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# A job's task: one of the task types' specs (kit.tasks.registry), told apart by `type`.
# Their validators' FieldErrors name the field from the task (`env.A`); kit.api.errors
# puts the task's place in front (`task.env.A`, `jobs[3].task.env.A`).
Task = Annotated[
    reduce(operator.or_, (t.spec for t in registry.task_types())), Field(discriminator="type")
]

# The objects kit.core parses, declared in the document as their JSON schemas
# (kit.api.declared); what a schema cannot say is in its description.
ScheduleObject = Annotated[dict[str, Any], WithJsonSchema(SCHEDULE_SCHEMA)]
RetryObject = Annotated[dict[str, Any], WithJsonSchema(RETRY_SCHEMA)]
MisfireObject = Annotated[dict[str, Any], WithJsonSchema(MISFIRE_SCHEMA)]


_PAUSE_DOC = (
    "auto-pause after this many dead runs in a row; 0: never; null: the operator's default "
    "(CRONFLEET_PAUSE_AFTER_DEAD, 5 unless changed)"
)
_NOTIFY_DOC = (
    "a webhook POSTed a JSON summary of each dead letter (run id, idempotency key, error), "
    "once per dead letter, retried; through the same egress guard as http tasks"
)


def _schedule(value: dict[str, Any]) -> dict[str, Any]:
    # `now` only anchors an interval without an anchor; the grace of one-off times
    # is checked by the route, which knows the settings.
    return schedule_to_dict(parse_schedule(schedule_input(value), now=datetime.now(UTC)))


def _retry(value: dict[str, Any]) -> dict[str, Any]:
    return RetryPolicy.parse(wholes(value, "max_attempts")).to_dict()


def _misfire(value: dict[str, Any]) -> dict[str, Any]:
    return MisfirePolicy.parse(wholes(value, "deadline_s")).to_dict()


class JobIn(_Strict):
    """A job as a client creates it."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")
    schedule: ScheduleObject
    task: Task
    retry: RetryObject = Field(default_factory=lambda: RetryPolicy().to_dict())
    timeout_s: whole_in(1, 86_400) = 3600
    overlap: Overlap = OverlapPolicy.allow.value
    misfire: MisfireObject = Field(default_factory=lambda: MisfirePolicy().to_dict())
    priority: Priority = PriorityTier.normal.value
    jitter_s: whole_in(0, 3600) = 0
    paused: bool = False
    pause_after_dead: whole_in(0, 10_000) | None = Field(default=None, description=_PAUSE_DOC)
    notify: Webhook | None = Field(default=None, description=_NOTIFY_DOC)

    @field_validator("schedule")
    @classmethod
    def _check_schedule(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _schedule(value)

    @field_validator("retry")
    @classmethod
    def _check_retry(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _retry(value)

    @field_validator("misfire")
    @classmethod
    def _check_misfire(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _misfire(value)

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "nightly-report",
                    "schedule": {"cron": "0 3 * * *", "timezone": "Europe/Paris"},
                    "task": {"type": "http", "url": "https://example.org/report", "method": "POST"},
                    "retry": {"max_attempts": 5, "base_s": 2, "cap_s": 600, "jitter": "full"},
                    "priority": "high",
                }
            ]
        }
    )

    def to_spec(self) -> JobSpec:
        return JobSpec(
            name=self.name,
            schedule=parse_schedule(self.schedule, now=datetime.now(UTC)),
            task=self.task.model_dump(exclude_none=True),
            retry=self.retry,
            misfire=self.misfire,
            timeout_s=self.timeout_s,
            overlap=self.overlap,
            priority=self.priority,
            jitter_s=self.jitter_s,
            paused=self.paused,
            pause_after_dead=self.pause_after_dead,
            notify=None if self.notify is None else self.notify.model_dump(),
        )


def _not_null(schema: dict[str, Any]) -> None:
    """An edit's fields may be left out, never sent as null (`changes` refuses null with
    the field named), and one at least is sent: the document says so, though the model's
    fields default to None."""
    schema["minProperties"] = 1
    for prop in schema.get("properties", {}).values():
        options = prop.get("anyOf")
        if options is not None:
            kept = [o for o in options if o.get("type") != "null"]
            if len(kept) == 1:
                prop.pop("anyOf")
                prop.update(kept[0])
            else:
                prop["anyOf"] = kept
        prop.pop("default", None)


class JobPatch(_Strict):
    """An edit: any client field; the others keep their values. Bumps `version`."""

    model_config = ConfigDict(json_schema_extra=_not_null)

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")
    schedule: ScheduleObject | None = None
    task: Task | None = None
    retry: RetryObject | None = None
    timeout_s: whole_in(1, 86_400) | None = None
    overlap: Overlap | None = None
    misfire: MisfireObject | None = None
    priority: Priority | None = None
    jitter_s: whole_in(0, 3600) | None = None
    paused: bool | None = None
    pause_after_dead: whole_in(0, 10_000) | None = Field(
        default=None, description=_PAUSE_DOC + "; send null to go back to it"
    )
    notify: Webhook | None = Field(default=None, description=_NOTIFY_DOC + "; null removes it")

    @field_validator("schedule")
    @classmethod
    def _check_schedule(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _schedule(value)

    @field_validator("retry")
    @classmethod
    def _check_retry(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _retry(value)

    @field_validator("misfire")
    @classmethod
    def _check_misfire(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _misfire(value)

    def changes(self) -> dict[str, Any]:
        """JobSpec field -> new value, for the fields the client sent."""
        sent = self.model_fields_set
        for name in sorted(sent):
            if getattr(self, name) is None and name not in NULLABLE_FIELDS:
                raise FieldError(name, "cannot be null; leave it out to keep the current value")
        if not sent:
            raise FieldError("body", "give at least one field to change")
        changes: dict[str, Any] = {name: getattr(self, name) for name in sent}
        if "schedule" in changes:
            changes["schedule"] = parse_schedule(
                schedule_input(changes["schedule"]), now=datetime.now(UTC)
            )
        if "task" in changes:
            changes["task"] = self.task.model_dump(exclude_none=True)  # type: ignore[union-attr]
        if self.notify is not None:
            changes["notify"] = self.notify.model_dump()
        return changes


class JobBatchIn(_Strict):
    jobs: list[JobIn] = Field(min_length=1, max_length=MAX_BATCH_JOBS)


def check_one_off_grace(schedule: Schedule, now: datetime, grace_s: int) -> None:
    """A one-off time may be a little in the past (clock skew, slow clients), not more."""
    if isinstance(schedule, OneOffSchedule):
        late_s = (now - schedule.at).total_seconds()
        if late_s > grace_s:
            raise FieldError(
                "schedule.at", f"is {int(late_s)} s in the past; at most {grace_s} s is accepted"
            )


def check_task_size(task: Mapping[str, Any], max_bytes: int) -> None:
    size = len(json.dumps(dict(task), separators=(",", ":")).encode())
    if size > max_bytes:
        raise FieldError("task", f"is {size} bytes of JSON; the limit is {max_bytes}")


def check_limits(spec: JobSpec, now: datetime, one_off_grace_s: int, max_task_bytes: int) -> None:
    """Checks that depend on the settings, so they are not in the models."""
    check_one_off_grace(spec.schedule, now, one_off_grace_s)
    check_task_size(spec.task, max_task_bytes)


class JobOut(BaseModel):
    job_id: str
    tenant: str
    name: str
    schedule: dict[str, Any]
    task: dict[str, Any]
    retry: dict[str, Any]
    timeout_s: int
    overlap: Overlap
    misfire: dict[str, Any]
    priority: Priority
    jitter_s: int
    paused: bool
    pause_after_dead: int | None = Field(description=_PAUSE_DOC)
    notify: dict[str, Any] | None = Field(
        default=None, description="the failure webhook, its secret header values masked"
    )
    status: Literal["active", "paused", "finished"]
    version: int
    next_fire_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, job: JobRecord) -> JobOut:
        return cls(**job_fields(job))


def job_fields(job: JobRecord) -> dict[str, Any]:
    """A job as the API shows it: JobOut's fields, in its order (secret task values
    masked). The hot routes serialize this directly (`trusted_json`)."""
    spec = job.spec
    return {
        "job_id": job.job_id,
        "tenant": job.tenant,
        "name": spec.name,
        "schedule": schedule_to_dict(spec.schedule),
        "task": redact_task(spec.task),
        "retry": dict(spec.retry),
        "timeout_s": spec.timeout_s,
        "overlap": spec.overlap,
        "misfire": dict(spec.misfire),
        "priority": spec.priority,
        "jitter_s": spec.jitter_s,
        "paused": spec.paused,
        "pause_after_dead": spec.pause_after_dead,
        "notify": None if spec.notify is None else redact_webhook(spec.notify),
        "status": job.status,
        "version": job.version,
        "next_fire_at": job.next_fire_at,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }


class JobBatchOut(BaseModel):
    count: int
    job_ids: list[str]


class RunOut(BaseModel):
    run_id: str
    job_id: str
    job_version: int
    scheduled_at: datetime
    attempt: int
    status: RunStateName = Field(
        description="`claimed`: a worker holds it and waits for its second (it has not "
        "started); `running`: its second has come and a worker holds it"
    )
    trigger: RunTrigger
    priority: Priority
    worker_id: str | None
    dispatched_at: datetime | None
    started_at: datetime | None = Field(description="the first attempt's start")
    finished_at: datetime | None
    error: str | None
    skip_reason: str | None
    created_at: datetime
    cancelled_by: str | None = Field(default=None, description="token id that cancelled it")
    claimed_at: datetime | None = Field(
        default=None, description="when a worker claimed the current attempt"
    )
    retry_at: datetime | None = Field(
        default=None, description="when the current attempt may start, for a retry"
    )

    @classmethod
    def of(cls, run: RunRecord) -> RunOut:
        return cls(**run_fields(run))


def run_fields(run: RunRecord) -> dict[str, Any]:
    """A run as the API shows it: RunOut's fields, in its order."""
    return {
        "run_id": run.run_id,
        "job_id": run.job_id,
        "job_version": run.job_version,
        "scheduled_at": run.scheduled_at,
        "attempt": run.attempt,
        "status": run.shown_status,
        "trigger": run.trigger_kind,
        "priority": run.priority,
        "worker_id": run.worker_id,
        "dispatched_at": run.dispatched_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "error": run.error,
        "skip_reason": run.skip_reason,
        "created_at": run.created_at,
        "cancelled_by": run.cancelled_by,
        "claimed_at": run.claimed_at,
        "retry_at": run.retry_at,
    }


_ANY_JSON: TypeAdapter[Any] = TypeAdapter(Any)


def trusted_json(
    body: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """A response built by the API from the store's own rows (`job_fields`,
    `run_fields`): serialized by pydantic's serializer, as the route's response model
    would be, without validating again what the store wrote (the route still declares
    the model: the OpenAPI document is unchanged). On the hot routes that validation
    and the model's construction are a share of the API's CPU; the fields
    and the serializer are the model's, so the bytes are the same
    (tests/unit/test_api_trusted_json.py)."""
    return Response(
        _ANY_JSON.dump_json(body),
        status_code=status_code,
        media_type="application/json",
        headers=dict(headers) if headers else None,
    )


class RunPageOut(BaseModel):
    runs: list[RunOut]
    next_cursor: str | None


class FieldProblem(BaseModel):
    field: str
    reason: str


class ErrorBody(BaseModel):
    code: str
    message: str
    fields: list[FieldProblem] = Field(default_factory=list)


class ErrorOut(BaseModel):
    """The one shape of every 4xx answer."""

    error: ErrorBody
