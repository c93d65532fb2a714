"""One vocabulary: every place that lists one of the kit's closed sets (run statuses,
trigger kinds, overlap policies, priority tiers, ...) derives it from the core's enums
(kit.core.vocabulary), and these tests hold each place equal to them: the schema's CHECK
constraints, the API's JSON schema and docs/vocabulary.md. The migrated database's
constraints: tests/integration/test_store_schema.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import CheckConstraint

from kit.api.app import create_app
from kit.core.audit import AuditAction
from kit.core.dispatch import PriorityTier
from kit.core.leases import BUSY, RunStatus
from kit.core.notify import NotificationStatus
from kit.core.owed import Outcome
from kit.core.policies import MisfireKind, OverlapPolicy
from kit.core.queue_task import COUNTED, FINISHED, LEASABLE, TaskStatus
from kit.core.retry import Jitter
from kit.core.run_state import RunState
from kit.core.switches import SwitchAction, SwitchKind
from kit.core.trigger import SkipReason, TriggerKind
from kit.core.vocabulary import CLOSED_SETS, render_vocabulary
from kit.settings import Settings
from kit.store import schema, vocab
from kit.tasks import registry
from tests.unit.vocabulary_checks import CHECKED_COLUMNS, quoted

ROOT = Path(__file__).resolve().parents[2]


def test_a_member_is_named_by_its_value():
    # psycopg writes an enum member by its name, JSON by its value: they must agree
    for closed in CLOSED_SETS:
        assert [m.name for m in closed.enum] == [m.value for m in closed.enum], closed.name


def test_the_index_holds_every_closed_set_once():
    enums = [c.enum for c in CLOSED_SETS]
    assert len(set(enums)) == len(enums)
    assert set(enums) == {
        RunStatus,
        TriggerKind,
        OverlapPolicy,
        PriorityTier,
        MisfireKind,
        Jitter,
        TaskStatus,
        AuditAction,
        SkipReason,
        RunState,
        NotificationStatus,
        SwitchKind,
        SwitchAction,
    }


def _checks() -> dict[tuple[str, str], str]:
    found = {}
    for table in schema.metadata.sorted_tables:
        for constraint in table.constraints:
            if isinstance(constraint, CheckConstraint) and " IN (" in str(constraint.sqltext):
                # the name the naming convention gave it, as the database has it
                found[(table.name, str(constraint.name))] = str(constraint.sqltext)
    return found


def test_every_in_list_check_of_the_schema_is_a_core_set():
    checks = _checks()
    assert set(checks) == set(CHECKED_COLUMNS)
    for key, sql in checks.items():
        assert tuple(quoted(sql)) == tuple(v.value for v in CHECKED_COLUMNS[key]), key


def test_the_schemas_sql_subsets_are_the_cores():
    assert set(quoted(schema.BUSY_SQL)) == {s.value for s in BUSY}
    assert set(quoted(schema.FINISHED_TASKS)) == {s.value for s in FINISHED}
    assert tuple(quoted(schema.LEASABLE_TASKS)) == tuple(s.value for s in LEASABLE)
    assert tuple(quoted(vocab.COUNTED_SQL)) == tuple(s.value for s in COUNTED)


def test_the_docs_table_is_generated_from_the_core():
    assert (ROOT / "docs" / "vocabulary.md").read_text() == render_vocabulary()


# --- the API's JSON schema


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    # the engine is never connected: building the document needs no database
    app = create_app(Settings(database_url="postgresql+psycopg://nobody@127.0.0.1:1/none"))
    return app.openapi()


def _enums(node: Any, path: str = "") -> Iterator[tuple[str, list[str]]]:
    if isinstance(node, dict):
        if "enum" in node:
            yield path, node["enum"]
        for key, value in node.items():
            yield from _enums(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _enums(value, f"{path}/{index}")


def _property_enum(spec: dict[str, Any], model: str, field: str) -> list[str]:
    prop = spec["components"]["schemas"][model]["properties"][field]
    for option in prop.get("anyOf", [prop]):  # an optional field: [{enum}, {null}]
        if "enum" in option:
            return option["enum"]
    raise AssertionError(f"{model}.{field} has no enum: {prop}")


@pytest.mark.parametrize(
    ("model", "field", "closed"),
    [
        ("JobIn", "overlap", OverlapPolicy),
        ("JobIn", "priority", PriorityTier),
        ("JobPatch", "overlap", OverlapPolicy),
        ("JobPatch", "priority", PriorityTier),
        ("JobOut", "overlap", OverlapPolicy),
        ("JobOut", "priority", PriorityTier),
        ("RunOut", "status", RunState),
        ("RunOut", "trigger", TriggerKind),
        ("RunOut", "priority", PriorityTier),
        ("LastRunOut", "status", RunState),
        ("OtherRunOut", "status", RunState),
        ("OtherRunOut", "trigger", TriggerKind),
        ("DeadLetterOut", "run_status", RunState),
        ("TaskCreatedOut", "status", TaskStatus),
    ],
)
def test_api_field_is_the_core_set(openapi, model: str, field: str, closed):
    assert _property_enum(openapi, model, field) == [m.value for m in closed]


# Enums of the API that are not one of the core's closed sets, each for its reason.
NOT_CORE_SETS = {
    ("not_found", "lease_refused"),  # AckRefusalOut.code: the queue API's refusal codes
    ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"),  # HttpTask.method: HTTP's
    ("active", "paused", "finished"),  # JobOut.status: derived per job, never stored
    tuple(Outcome),  # kit.core.owed.Outcome, the explain answer: the core enum itself
    registry.names(),  # GET /v1/jobs?task_type=: the task registry's types (kit.tasks)
    (*(s.value for s in RunStatus), "none"),  # GET /v1/jobs?last_status=: or never ran
}


def test_every_api_enum_is_a_core_set_or_a_named_exception(openapi):
    sets = [tuple(c.values) for c in CLOSED_SETS]
    for path, values in _enums(openapi):
        if tuple(values) in NOT_CORE_SETS:
            continue
        # a whole core set, in the core's order, or a subset of one (NackOut: queued, dead)
        assert tuple(values) in sets or any(set(values) < set(s) for s in sets), path


def test_api_schemas_declare_the_core_kinds(openapi):
    props = openapi["components"]["schemas"]["JobIn"]["properties"]
    assert props["misfire"]["properties"]["kind"]["enum"] == [k.value for k in MisfireKind]
    assert props["retry"]["properties"]["jitter"]["enum"] == [j.value for j in Jitter]
