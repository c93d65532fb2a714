"""The strict JSON parser of request bodies (kit/api/body.py): what JSON allows and
PostgreSQL refuses is named by its path; everything else parses as json.loads does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.api.body import MAX_DEPTH, InvalidBody, loads_strict

_text = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=30,
)


@given(_json)
def test_clean_json_parses_as_json_loads_does(value: Any) -> None:
    raw = json.dumps(value)
    assert loads_strict(raw) == json.loads(raw)


def _problems(raw: str) -> list[tuple[str, str]]:
    with pytest.raises(InvalidBody) as caught:
        loads_strict(raw)
    return caught.value.problems


@pytest.mark.parametrize(
    ("raw", "path", "reason"),
    [
        ('{"a": NaN}', "a", "finite"),
        ('{"a": [1, Infinity]}', "a[1]", "finite"),
        ('{"a": {"b": -Infinity}}', "a.b", "finite"),
        ('{"a": 1e400}', "a", "finite"),
        ('{"a": "x\\u0000"}', "a", "NUL"),
        ('{"a\\u0000": 1}', "body", "key"),
        ('{"a": "\\ud800"}', "a", "surrogate"),
        ('{"n": ' + "9" * 4300 + "}", "n", "4300 digits"),
        ('{"n": 1.' + "5" * 200 + "}", "n", "digits"),
        ("NaN", "body", "finite"),
        ("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2), "[0][0][0]", "deeper"),
        ("[" * 100_000 + "]" * 100_000, "body", "deeper"),
    ],
)
def test_each_problem_is_named_by_its_path(raw: str, path: str, reason: str) -> None:
    problems = _problems(raw)
    assert any(p.startswith(path) and reason in r for p, r in problems), problems


def test_every_problem_is_reported() -> None:
    problems = _problems('{"a": NaN, "b": [1, "\\u0000"], "c": {"d": Infinity}}')
    assert sorted(p for p, _ in problems) == ["a", "b[1]", "c.d"]


def test_not_json_is_left_to_fastapi() -> None:
    with pytest.raises(json.JSONDecodeError):
        loads_strict("{not json")
