"""Every third-party package that kit/ or sim/ imports is a runtime dependency in
pyproject.toml, so `pip install -e .` alone gives a working `cronfleet worker` and
`cronfleet sim` (issue 7, item 23: httpx and numpy were only pulled in by the test extras
or by chance)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWN = {"kit", "sim"}


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


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_norm(re.split(r"[\s<>=!~;\[]", dep, maxsplit=1)[0]) for dep in project["dependencies"]}


def test_every_imported_package_is_a_runtime_dependency() -> None:
    distributions = importlib.metadata.packages_distributions()
    declared = _declared()
    missing: list[str] = []
    for package in ("kit", "sim"):
        for module, where in _imported_top_levels(package).items():
            if module in OWN or module in sys.stdlib_module_names or module == "__future__":
                continue
            owners = {_norm(d) for d in distributions.get(module, [])}
            assert owners, f"{where} imports {module!r}, which no installed distribution provides"
            if not owners & declared:
                missing.append(f"{module} ({', '.join(sorted(owners))}) imported by {where}")
    assert not missing, "not in [project.dependencies]: " + "; ".join(missing)


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
