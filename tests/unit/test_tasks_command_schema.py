"""The command task's `env` names and `cwd` as the API's document declares them are the
kit's own checks (kit.core.task_policy), string for string: what the pattern allows the
check allows, and the other way round (so the conformance test's allowed list need not
name them)."""

from __future__ import annotations

import itertools
import re

from kit.core.task_policy import env_name_refusal, normal_path
from kit.tasks.command import ENV_NAME_PATTERN, NORMAL_PATH_PATTERN

FORM = "must be a name of letters, digits and '_'"


def test_the_cwd_pattern_is_normal_path() -> None:
    pattern = re.compile(NORMAL_PATH_PATTERN)
    for n in range(1, 9):
        for parts in itertools.product(("/", ".", "a", "\x00"), repeat=n):
            path = "".join(parts)
            assert bool(pattern.match(path)) == normal_path(path), repr(path)


def test_the_env_name_pattern_is_the_form_check() -> None:
    pattern = re.compile(ENV_NAME_PATTERN)
    for n in range(1, 4):
        for chars in itertools.product(("A", "z", "_", "0", "-", "=", "é", " "), repeat=n):
            name = "".join(chars)
            refused_for_form = (env_name_refusal(name) or "").startswith(FORM)
            assert bool(pattern.match(name)) == (not refused_for_form), repr(name)


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    """A JSON Schema pattern's `$` is the end of the text; Python's `$` also matches
    before a final newline, which let `A\\n` through the kit's check."""
    assert (env_name_refusal("A\n") or "").startswith(FORM)
