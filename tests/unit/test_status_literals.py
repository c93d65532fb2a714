"""No status (nor what made a run: a trigger kind) is written as a bare SQL literal
outside kit/core and the migrations: the store renders every one from the core's enums
(kit.store.vocab), so a value renamed or a group changed in the core reaches every
statement (docs/architecture.md, "Statuses in SQL").

Checked on the source (AST): every string constant in kit/ (docstrings aside; comments
are not strings) is searched for a status word in single quotes, the way SQL writes a
literal. Python's own comparisons (`status == "dead"`) carry no inner quotes and pass.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

import pytest

from kit.core.leases import RunStatus
from kit.core.notify import NotificationStatus
from kit.core.queue_task import TaskStatus
from kit.core.run_state import RunState
from kit.core.trigger import TriggerKind
from kit.store.vocab import sql_status, sql_statuses

ROOT = Path(__file__).resolve().parents[2]
# The core owns the vocabulary; the migrations are history, kept as they were written.
EXEMPT = ("kit/core/", "kit/store/migrations/")
STATUS_ENUMS: tuple[type[StrEnum], ...] = (
    RunStatus,
    RunState,
    TaskStatus,
    NotificationStatus,
    TriggerKind,
)
WORDS = sorted({m.value for enum in STATUS_ENUMS for m in enum})
QUOTED = re.compile("'(" + "|".join(WORDS) + ")'")
# (path, literal) -> why it may stay. Every entry must still be found (no stale entries).
ALLOWED: dict[tuple[str, str], str] = {}


def _docstrings(tree: ast.AST) -> set[int]:
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, owners) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def bare_literals(source: str) -> Iterator[tuple[int, str]]:
    """(line, literal) of each quoted status word in a string constant of `source`
    (an f-string's literal parts included), docstrings aside."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            for match in QUOTED.finditer(node.value):
                yield node.lineno, match.group(0)


def _kit_sources() -> Iterator[tuple[str, str]]:
    for path in sorted((ROOT / "kit").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(EXEMPT):
            yield rel, path.read_text()


def test_no_bare_status_literal_in_the_kits_sql() -> None:
    found = [
        (rel, line, literal)
        for rel, source in _kit_sources()
        for line, literal in bare_literals(source)
        if (rel, literal) not in ALLOWED
    ]
    shown = "\n".join(f"{rel}:{line}: {literal}" for rel, line, literal in found)
    assert not found, f"render these from kit.core via kit.store.vocab:\n{shown}"


def test_every_allowed_literal_is_still_there() -> None:
    present = {(rel, lit) for rel, source in _kit_sources() for _, lit in bare_literals(source)}
    assert set(ALLOWED) <= present


def test_the_scan_finds_sql_literals_and_passes_the_rest() -> None:
    source = '''
"""A docstring may say 'dead'."""
A = "UPDATE runs SET status = 'dead'"
B = f"WHERE status IN ('queued', {A}) AND skip_reason = '{A}'"
C = "dead"  # a Python comparison's operand: no inner quotes
def f():
    """Nor does this 'running' count."""
    return f"x = '{C}'"
'''
    assert sorted(bare_literals(source)) == [(3, "'dead'"), (4, "'queued'")]


class _Odd(StrEnum):
    quote = "it's"


def test_the_store_renders_statuses_from_the_core() -> None:
    assert sql_status(RunStatus.running) == "'running'"
    assert sql_statuses((RunStatus.pending, RunStatus.running)) == "('pending', 'running')"
    assert sql_statuses((TaskStatus.leased, TaskStatus.queued)) == "('leased', 'queued')"
    assert sql_statuses((TriggerKind.manual, TriggerKind.backfill)) == "('manual', 'backfill')"


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ("running", TypeError),  # a bare string is not from the vocabulary
        (_Odd.quote, ValueError),  # a value that is not a plain word is never quoted
    ],
)
def test_only_plain_words_of_an_enum_are_rendered(bad: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        sql_status(bad)  # type: ignore[arg-type]


def test_a_set_is_refused_its_order_differs_between_processes() -> None:
    with pytest.raises(TypeError, match="order"):
        sql_statuses(frozenset({RunStatus.pending, RunStatus.running}))  # type: ignore[arg-type]
