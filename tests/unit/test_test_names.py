"""Test modules are imported by their base name (pytest's default import mode, the test
folders are not packages): two files of one name in different folders stop the whole
run at collection, as a merge once did in CI. Caught here, before CI."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_name_of_its_own() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    twice = sorted(n for n, c in names.items() if c > 1)
    assert not twice, f"test modules sharing a name: {twice}"
