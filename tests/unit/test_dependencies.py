"""Every third-party package a part of the distribution imports is declared where that
part is installed from: kit/ in the base dependencies (`pip install cronfleet` gives a
working worker, scheduler and API), sim/ in the `sim` extra, chaos/ in the `chaos` extra.
A package that only the test extras pulled in by chance is caught here."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OWN = {"kit", "sim", "chaos"}
# part of the distribution -> the extra it is installed with ("" for the base)
PARTS = {"kit": "", "sim": "sim", "chaos": "chaos"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_top_levels(package: str) -> dict[str, str]:
    """top-level module -> one file that imports it."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def _name(requirement: str) -> str:
    return _norm(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])


def _declared(extra: str) -> set[str]:
    """The distributions the base (extra "") or an extra brings, self-references followed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] if not extra else project["optional-dependencies"][extra]
    found = {_name(r) for r in project["dependencies"]}
    for requirement in requirements:
        if _name(requirement) == "cronfleet":
            for inner in re.findall(r"\[(.*)\]", requirement)[0].split(","):
                found |= _declared(inner.strip())
        else:
            found.add(_name(requirement))
    return found


@pytest.mark.parametrize("package", sorted(PARTS))
def test_every_imported_package_is_declared_where_its_part_is_installed(package: str) -> None:
    distributions = importlib.metadata.packages_distributions()
    declared = _declared(PARTS[package])
    missing: list[str] = []
    for module, where in _imported_top_levels(package).items():
        if module in OWN or module in sys.stdlib_module_names or module == "__future__":
            continue
        owners = {_norm(d) for d in distributions.get(module, [])}
        assert owners, f"{where} imports {module!r}, which no installed distribution provides"
        if not owners & declared:
            missing.append(f"{module} ({', '.join(sorted(owners))}) imported by {where}")
    extra = f"[project.optional-dependencies] {PARTS[package]}" if PARTS[package] else "base"
    assert not missing, f"not in {extra}: " + "; ".join(missing)


def test_sqlalchemys_async_engine_brings_greenlet() -> None:
    """The kit uses SQLAlchemy's async engine, which needs greenlet: an optional extra
    since SQLAlchemy 2.1. Without it a machine installed from the wheel alone could not
    start the API (the deploy test caught it); the development machine had greenlet."""
    users = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "kit").rglob("*.py")
        if "sqlalchemy.ext.asyncio" in p.read_text()
    ]
    assert users, "the kit no longer uses the async engine: drop the extra"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    sqlalchemy = [
        d for d in project["dependencies"] if _norm(re.split(r"[\s<>=!~;\[]", d)[0]) == "sqlalchemy"
    ]
    assert sqlalchemy and "[asyncio]" in sqlalchemy[0].replace(" ", ""), (
        f"{users} use sqlalchemy.ext.asyncio: declare sqlalchemy[asyncio], got {sqlalchemy}"
    )
