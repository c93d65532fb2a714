"""The environment names no command may set, whatever the operator allows: every entry
refused in any case and with any suffix of a prefix, nothing else, and the security
page's table the same list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kit.core.env_names import ALWAYS_REFUSED_ENV, always_refused, always_refused_prefix

ROOT = Path(__file__).resolve().parents[2]
ENTRIES = [(why, name) for why, names in ALWAYS_REFUSED_ENV for name in names]


@pytest.mark.parametrize(("why", "entry"), ENTRIES, ids=[e for _, e in ENTRIES])
def test_every_entry_is_refused_whatever_its_case(why: str, entry: str) -> None:
    names = [entry[:-1], entry[:-1] + "ANY_THING"] if entry.endswith("*") else [entry]
    for name in names:
        for spelled in (name, name.lower(), name.title()):
            assert always_refused(spelled) == why, spelled


@pytest.mark.parametrize(
    "name",
    ["APP_MODE", "REPORT_DATE", "LANG", "TZ", "NODE_ENV", "OLD_LD_PATH", "PS", "PS5", "HOMER"],
)
def test_other_names_are_the_operators_to_allow(name: str) -> None:
    assert always_refused(name) is None


def test_a_prefix_is_refused_only_if_every_name_it_covers_is() -> None:
    assert always_refused_prefix("PYTHON") and always_refused_prefix("ld_foo")
    assert always_refused_prefix("GIT_") and always_refused_prefix("BASH_F")
    for wider in ("P", "PY", "G", "B", "", "APP_"):
        assert always_refused_prefix(wider) is None, wider


def test_the_security_page_lists_every_always_refused_name() -> None:
    page = (ROOT / "docs" / "security.md").read_text()
    table = page.split("| why | always refused |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| (.+?) \| (.+) \|$", table, re.MULTILINE)[1:]  # after | --- |
    listed = [(why, tuple(re.findall(r"`([^`]+)`", names))) for why, names in rows]
    assert listed == list(ALWAYS_REFUSED_ENV)
