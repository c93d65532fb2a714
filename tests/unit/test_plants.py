"""The planted bugs of tests/plants.py stay makeable: each edit's text is found exactly
once in the code as it is (else docs/testing.md's instructions no longer apply), and
each names tests that exist. Whether the tests catch them: `python -m scripts.plants`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.plants import GUARDS, MACHINE, PLANTS, ROOT, Plant, scratch_copy

ALL = (*PLANTS, *GUARDS, *MACHINE)


@pytest.mark.parametrize("plant", ALL, ids=lambda p: p.name)
def test_a_plant_applies_to_the_code_as_it_is(plant: Plant, tmp_path: Path) -> None:
    source = (ROOT / plant.path).read_text()
    for old, new in plant.edits:
        assert source.count(old) == 1, f"{plant.name}: {old!r}"
        assert old != new
    copy = tmp_path / plant.path
    copy.parent.mkdir(parents=True)
    copy.write_text(source)
    plant.apply(tmp_path)
    assert copy.read_text() != source
    compile(copy.read_text(), str(copy), "exec")  # a plant is a bug, not a syntax error


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("plant", ALL, ids=lambda p: p.name)
def test_a_plant_names_tests_that_exist(plant: Plant) -> None:
    assert plant.caught_by
    for node in plant.caught_by:
        file, _, name = node.partition("::")
        assert (ROOT / file).is_file(), node
        if name:
            assert name in _test_names(ROOT / file), node


def test_the_five_plants_are_in_the_docs() -> None:
    doc = (ROOT / "docs" / "testing.md").read_text()
    assert len(PLANTS) == 5
    assert {p.name for p in PLANTS if f"`{p.name}`" not in doc} == set()


def test_a_scratch_copy_is_a_checkout_of_its_own(tmp_path: Path) -> None:
    copy = scratch_copy(tmp_path / "c", names=("kit",))
    assert (copy / "kit" / "core" / "leases.py").read_text() == (
        ROOT / "kit" / "core" / "leases.py"
    ).read_text()
    assert not list(copy.rglob("__pycache__"))


def test_a_plant_judged_alone_replaces_only_its_row() -> None:
    from scripts.plants import Verdict, render

    a, b = GUARDS[0], GUARDS[1]
    kept = {
        a.name: f"| `{a.name}` | old | `x` | `t` | caught |",
        b.name: f"| `{b.name}` | old | `x` | - | **not caught** (every test passed) |",
    }
    table = render([Verdict(b, True, "tests/t.py::test_x", 1.0)], False, [a, b], kept)
    assert kept[a.name] in table
    assert f"| `{b.name}` | a store guard | `{b.path}` | `tests/t.py::test_x` | caught |" in table
    assert "not caught" not in table and "**2 of 2 caught.**" in table
