"""The OpenAPI document, with the rules every request body obeys declared on each schema.

Bodies are parsed as strict JSON (kit.api.body) before any model sees them: no string
and no key holds NUL, no number has more than 100 digits. Those rules hold for every
body whatever its model says, so they are added here to each schema rather than
repeated on each field: a string without a pattern gets one that excludes NUL, an
object whose keys are free gets the same for its keys, and a value of any JSON type
(a queue task's payload) becomes `JsonValue`, which says all three. The description
lists what no schema can say (tests/integration/test_api_conformance.py allows exactly
those, each with its reason).
"""

from __future__ import annotations

from typing import Any

from kit.api.declared import NO_NUL

JSON_VALUE = "JsonValue"
_REF = f"#/components/schemas/{JSON_VALUE}"
_JSON_VALUE_SCHEMA: dict[str, Any] = {
    "description": "Any JSON value: strings and keys without NUL; not declared: numbers "
    "written with more than 100 digits and nesting deeper than 64 levels are refused",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "number"},
        {"type": "string", "pattern": NO_NUL},
        {"type": "array", "items": {"$ref": _REF}},
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": _REF},
        },
    ],
}
# Keys that say nothing of a value: a schema with only these takes any JSON value.
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "deprecated"})

NOT_DECLARED = """

**What the schemas cannot declare** (a request they allow may still be refused with a
422 naming the field and the reason): whether croniter takes a cron expression and
whether it ever fires; whether the server's IANA database has a time zone; that
`retry.cap_s` is at least `retry.base_s`; that a `secret_headers` or `secret_env` name
is an entry of `headers` or `env`, and the names a command's `env` may not set; a
number written with more than 100 digits; a 29 February of a year that is not a leap
year, an instant whose offset carries it out of its range
(`1970-01-01T00:30:00+01:00`), and a range whose `to` is not after its `from`; that a
`cursor` is one this API gave out; that `/v1/next-fires` takes exactly one of `cron`,
`every_s` and `at` (`timezone` with `cron` only, `anchor` with `every_s` only); that a
backfill's range is in the past, within the run retention and owes at most the
operator's limit of fires, and that explain's range spans at most 366 days; that a
one-off time is not past the operator's grace; a task or payload over the operator's
size limit; a body nested deeper than 64 levels."""


# How one answer names the object the next request acts on (OpenAPI links): what a
# client follows from a created job to its runs, from a leased task to its ack. Each is
# (source method, source path, status, link name, target method, target path,
# parameters, request body or None).
_JOB = {"job_id": "$response.body#/job_id"}
_RUN = {"run_id": "$response.body#/run_id"}
_LEASED = {"task_id": "$response.body#/tasks/0/task_id"}
_LEASE_TOKEN = {"lease_token": "$response.body#/tasks/0/lease_token"}
_QUEUE = {"queue": "$request.path.queue"}
_SAME_JOB = {"job_id": "$request.path.job_id"}
LINKS: tuple[tuple[str, str, str, str, str, str, dict[str, str], dict[str, Any] | None], ...] = (
    *(
        ("post", "/v1/jobs", status, name, method, path, _JOB, None)
        for status in ("201", "200")
        for name, method, path in (
            ("GetJob", "get", "/v1/jobs/{job_id}"),
            ("EditJob", "patch", "/v1/jobs/{job_id}"),
            ("DeleteJob", "delete", "/v1/jobs/{job_id}"),
            ("ListRuns", "get", "/v1/jobs/{job_id}/runs"),
            ("RunNow", "post", "/v1/jobs/{job_id}/runs"),
            ("Audit", "get", "/v1/jobs/{job_id}/audit"),
            ("Explain", "get", "/v1/jobs/{job_id}/explain"),
            ("Backfill", "post", "/v1/jobs/{job_id}:backfill"),
        )
    ),
    (
        "delete",
        "/v1/jobs/{job_id}",
        "204",
        "GetDeleted",
        "get",
        "/v1/jobs/{job_id}",
        _SAME_JOB,
        None,
    ),
    *(
        ("post", "/v1/jobs/{job_id}/runs", status, name, method, path, _RUN, None)
        for status in ("202", "200")
        for name, method, path in (
            ("GetRun", "get", "/v1/runs/{run_id}"),
            ("CancelRun", "post", "/v1/runs/{run_id}:cancel"),
        )
    ),
    *(
        ("post", "/v1/queues/{queue}/tasks", "201", name, method, path, _QUEUE, body)
        for name, method, path, body in (
            ("Lease", "post", "/v1/queues/{queue}/lease", {"worker_id": "w"}),
            ("Stats", "get", "/v1/queues/{queue}/stats", None),
        )
    ),
    *(
        ("post", "/v1/queues/{queue}/lease", "200", name, "post", path, _LEASED, body)
        for name, path, body in (
            ("Ack", "/v1/tasks/{task_id}/ack", _LEASE_TOKEN),
            ("Nack", "/v1/tasks/{task_id}/nack", _LEASE_TOKEN),
            ("Heartbeat", "/v1/tasks/{task_id}/heartbeat", {**_LEASE_TOKEN, "extend_sec": 30}),
        )
    ),
)


def declare_links(document: dict[str, Any]) -> dict[str, Any]:
    paths = document.get("paths", {})
    for method, path, status, name, target_method, target, parameters, body in LINKS:
        source = paths.get(path, {}).get(method)
        operation = paths.get(target, {}).get(target_method)
        if source is None or operation is None or status not in source.get("responses", {}):
            continue
        link: dict[str, Any] = {"operationId": operation["operationId"], "parameters": parameters}
        if body is not None:
            link["requestBody"] = body
        source["responses"][status].setdefault("links", {})[name] = link
    return document


def _is_any(schema: dict[str, Any]) -> bool:
    return schema.keys() <= _ANNOTATIONS


def _declare(schema: Any) -> Any:
    """The body rules on one schema and everything in it; returns the schema to use."""
    if isinstance(schema, list):
        return [_declare(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if _is_any(schema):
        kept = {k: v for k, v in schema.items() if k in ("title", "description")}
        return {**kept, "$ref": _REF} if kept else {"$ref": _REF}
    out = {key: _declare_under(key, value) for key, value in schema.items()}
    kind = out.get("type")
    if kind == "string" and not ({"pattern", "enum", "const", "format"} & out.keys()):
        out["pattern"] = NO_NUL
    if kind == "object" and out.get("additionalProperties", False) is not False:
        out.setdefault("propertyNames", {"pattern": NO_NUL})
    return out


def _declare_under(key: str, value: Any) -> Any:
    """Descend into subschemas only (not into `properties`' names, `required`, `enum`...)."""
    if key in ("properties", "$defs", "patternProperties"):
        return {name: _declare(sub) for name, sub in value.items()}
    if key in ("items", "additionalProperties", "not", "propertyNames"):
        return _declare(value) if isinstance(value, dict) else value
    if key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        return [_declare(sub) for sub in value]
    return value


def declare_body_rules(document: dict[str, Any]) -> dict[str, Any]:
    """The document with the strict-JSON rules on every schema of a body and on every
    free-text parameter, `JsonValue` defined, and what cannot be declared described."""
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in list(schemas):
        schemas[name] = _declare(schemas[name])
    schemas[JSON_VALUE] = _JSON_VALUE_SCHEMA
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                if "schema" in parameter:
                    parameter["schema"] = _declare(parameter["schema"])
            for media in operation.get("requestBody", {}).get("content", {}).values():
                if "schema" in media:
                    media["schema"] = _declare(media["schema"])
    declare_links(document)
    document.setdefault("info", {})["description"] = (
        document.get("info", {}).get("description", "") + NOT_DECLARED
    )
    return document
