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
_SHAPE_KEYS = frozenset(
    {
        "type",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "$ref",
        "enum",
        "const",
        "properties",
        "items",
        "additionalProperties",
    }
)

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
`every_s` and `at`; that a backfill's range is in the past, within the run retention
and owes at most the operator's limit of fires, and that explain's range spans at most
366 days; that a one-off time is not past the operator's grace; a task or payload over
the operator's size limit; a body nested deeper than 64 levels."""


def _is_any(schema: dict[str, Any]) -> bool:
    return not (_SHAPE_KEYS & schema.keys())


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
    document.setdefault("info", {})["description"] = (
        document.get("info", {}).get("description", "") + NOT_DECLARED
    )
    return document
