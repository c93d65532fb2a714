"""The import rules of docs/architecture.md, checked on the source (AST), not by importing it.

- kit/core: imports nothing of the project outside kit.core, no I/O library, and
  reads neither the wall clock nor the global random state.
- sim/: imports from kit only kit.core (checked when sim/ has modules).
- the kit's layers (LAYERS): the drivers (store, transport, tasks) import only the core,
  the settings, the crash points (kit.crash) and themselves; a service (api, scheduler,
  worker, reaper, maintenance) imports those and itself, never another service;
  nothing imports the top-level CLI (`kit.cli`) except to run it from a `__main__` block.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Top-level modules kit/core must not import (I/O, network, processes, threads, OS).
FORBIDDEN_IN_CORE = frozenset(
    {
        "sqlalchemy",
        "alembic",
        "psycopg",
        "psycopg2",
        "confluent_kafka",
        "kafka",
        "simpy",
        "httpx",
        "requests",
        "aiohttp",
        "urllib",
        "urllib3",
        "http",
        "socket",
        "ssl",
        "select",
        "selectors",
        "subprocess",
        "asyncio",
        "threading",
        "multiprocessing",
        "concurrent",
        "os",
        "shutil",
        "pathlib",
        "tempfile",
        "time",
        "secrets",
        "fastapi",
        "uvicorn",
        "pydantic_settings",
    }
)
# Calls that read a clock, whatever object they are called on (datetime.now, date.today).
CLOCK_METHODS = frozenset({"now", "utcnow", "today"})
# The only names kit/core may take from the `random` module: an explicit seeded source.
RANDOM_ALLOWED = frozenset({"Random"})
# uuid1 reads the clock, uuid4 the OS random source.
UUID_FORBIDDEN = frozenset({"uuid1", "uuid4"})


def _modules(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.py")) if directory.is_dir() else []


def core_violations(source: str) -> list[str]:
    """Every breach of the kit/core rules in one module's source."""
    found: list[str] = []
    tree = ast.parse(source)
    random_aliases: set[str] = set()
    uuid_aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                found += _core_import_problems(name, node.lineno)
                if name == "random":
                    random_aliases.add(alias.asname or "random")
                if name == "uuid":
                    uuid_aliases.add(alias.asname or "uuid")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports stay inside the package
                continue
            module = node.module or ""
            found += _core_import_problems(module, node.lineno)
            names = {a.name for a in node.names}
            if module == "random" and names - RANDOM_ALLOWED:
                found.append(f"line {node.lineno}: from random import {sorted(names)}")
            if module == "uuid" and names & UUID_FORBIDDEN:
                found.append(f"line {node.lineno}: from uuid import {sorted(names)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            owner = node.func.value
            if attr in CLOCK_METHODS:
                found.append(f"line {node.lineno}: clock read .{attr}()")
            if isinstance(owner, ast.Name):
                if owner.id in random_aliases and attr not in RANDOM_ALLOWED:
                    found.append(f"line {node.lineno}: global random {owner.id}.{attr}()")
                if owner.id in uuid_aliases and attr in UUID_FORBIDDEN:
                    found.append(f"line {node.lineno}: {owner.id}.{attr}()")
    return found


def _core_import_problems(module: str, lineno: int) -> list[str]:
    top = module.split(".")[0]
    if top in FORBIDDEN_IN_CORE:
        return [f"line {lineno}: imports I/O module {module}"]
    if top in ("kit", "sim", "chaos", "loadtest") and not (
        module == "kit.core" or module.startswith("kit.core.")
    ):
        return [f"line {lineno}: imports {module} (kit.core imports only kit.core)"]
    return []


def sim_violations(source: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            names = [module]
            if module == "kit":  # `from kit import store`
                names = [f"kit.{a.name}" for a in node.names]
        for name in names:
            if (name == "kit" or name.startswith("kit.")) and not (
                name == "kit.core" or name.startswith("kit.core.")
            ):
                found.append(f"line {node.lineno}: imports {name} (sim may use only kit.core)")
    return found


# kit package -> the kit packages its modules may import (besides the standard library and
# third parties). `kit.X` for a module directly under kit/ (settings, cli).
DRIVERS = ("store", "transport", "tasks")
SERVICES = ("api", "scheduler", "worker", "reaper", "maintenance")
_BELOW_DRIVERS = frozenset({"core", "settings", "crash"})
LAYERS: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    **{d: _BELOW_DRIVERS | {d} for d in DRIVERS},
    **{s: _BELOW_DRIVERS | set(DRIVERS) | {s} for s in SERVICES},
    # the API's Python client: standard library only, installed with the kit, usable
    # by a program that has nothing else of it
    "client": frozenset({"client"}),
}


def _main_block(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` — an entry point, allowed to run `kit.cli.main`."""
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def kit_imports(source: str) -> list[tuple[int, str]]:
    """(line, kit package) of every `kit.*` import outside `__main__` blocks."""
    tree = ast.parse(source)
    body = [n for n in tree.body if not _main_block(n)]
    found: list[tuple[int, str]] = []
    for node in (n for top in body for n in ast.walk(top)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            module = node.module or ""
            names = [f"kit.{a.name}" for a in node.names] if module == "kit" else [module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "kit" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


def layer_violations(package: str, source: str) -> list[str]:
    allowed = LAYERS[package]
    return [
        f"line {line}: kit.{package} imports kit.{imported}"
        for line, imported in kit_imports(source)
        if imported not in allowed
    ]


CORE_MODULES = _modules(ROOT / "kit" / "core")
SIM_MODULES = _modules(ROOT / "sim")


def test_core_has_modules():
    assert len(CORE_MODULES) >= 8


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: p.name)
def test_core_module_is_pure(path: Path):
    assert core_violations(path.read_text()) == []


# The calibration measures the kit's own drivers and services to write the model's
# profile: the model's one door to the kit, which no module of the model opens.
CALIBRATION = ROOT / "sim" / "calibrate.py"


def test_sim_imports_only_kit_core():
    problems = {
        str(p.relative_to(ROOT)): v
        for p in SIM_MODULES
        if p != CALIBRATION and (v := sim_violations(p.read_text()))
    }
    assert problems == {}


def test_no_module_of_the_model_imports_the_calibration():
    importers = [
        str(p.relative_to(ROOT))
        for p in SIM_MODULES
        if p != CALIBRATION and "sim.calibrate" in p.read_text()
    ]
    assert importers == []


@pytest.mark.parametrize(
    "source",
    [
        "import sqlalchemy",
        "from psycopg import sql",
        "import confluent_kafka.admin",
        "import simpy",
        "import httpx",
        "import requests",
        "import socket",
        "import subprocess",
        "import os.path",
        "from time import monotonic",
        "import time\nx = time.time()",
        "from datetime import datetime\nx = datetime.now()",
        "import datetime\nx = datetime.datetime.utcnow()",
        "from datetime import date\nx = date.today()",
        "import random\nx = random.random()",
        "import random as r\nx = r.randint(1, 2)",
        "from random import choice",
        "import uuid\nx = uuid.uuid4()",
        "from kit.store import models",
        "from kit import settings",
        "import kit.settings",
        "import sim.model",
    ],
)
def test_core_rule_catches(source: str):
    assert core_violations(source)


def test_core_rule_allows_pure_code():
    ok = (
        "import random\nfrom datetime import UTC, datetime\nfrom kit.core.errors import X\n"
        "def f(rng: random.Random):\n    return rng.random(), datetime.fromtimestamp(0, UTC)\n"
        "r = random.Random(4)\n"
    )
    assert core_violations(ok) == []


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("from kit.store import models", True),
        ("import kit.api.app", True),
        ("from kit import settings", True),
        ("from kit import core", False),
        ("from kit.core.leases import claim_run", False),
        ("import simpy", False),
    ],
)
def test_sim_rule(source: str, bad: bool):
    assert bool(sim_violations(source)) is bad


def test_layers_cover_every_kit_package_with_code():
    """A new package under kit/ must be given its place in LAYERS (or in the exemptions:
    the local stack's tooling and the top-level commands)."""
    packages = {p.name for p in (ROOT / "kit").iterdir() if (p / "__init__.py").is_file()}
    assert packages - set(LAYERS) == {"stack"}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_kit_layers(package: str):
    problems = {
        str(p.relative_to(ROOT)): v
        for p in _modules(ROOT / "kit" / package)
        if (v := layer_violations(package, p.read_text()))
    }
    assert problems == {}


@pytest.mark.parametrize(
    ("package", "source", "bad"),
    [
        ("worker", "from kit.reaper.reaper import publish_pointers", True),
        ("worker", "import kit.api.app", True),
        ("worker", "from kit import scheduler", True),
        ("store", "from kit.cli import UsageError", True),
        ("store", "from kit.transport import RunMessage", True),
        ("api", "def f():\n    from kit.cli import UsageError", True),
        ("worker", "from kit.transport.republish import publish_pointers", False),
        ("worker", "from kit.core.errors import UsageError", False),
        ("store", "from kit.settings import Settings", False),
        ("reaper", "if __name__ == '__main__':\n    from kit.cli import main", False),
    ],
)
def test_layer_rule(package: str, source: str, bad: bool):
    assert bool(layer_violations(package, source)) is bad


def test_architecture_doc_names_every_core_module_and_layer():
    """docs/architecture.md stays true: one row per kit/core module (no more, no less)
    and every package of LAYERS placed in its layer table."""
    import re

    doc = (ROOT / "docs" / "architecture.md").read_text()
    core_section = doc.split("## kit/core", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(\w+)` \|", core_section, re.MULTILINE))
    modules = {p.stem for p in CORE_MODULES if p.stem != "__init__"}
    assert rows == modules
    layers_section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
    assert {p for p in LAYERS if f"`kit/{p}`" not in layers_section} == set()


@pytest.mark.parametrize("module", ["settings.py", "crash.py"])
def test_settings_and_crash_points_import_only_the_core(module: str):
    """kit.settings and kit.crash are imported by every driver; they may not pull a
    driver (or its library) into a process that only wanted its settings or a point."""
    imported = {name for _, name in kit_imports((ROOT / "kit" / module).read_text())}
    assert imported <= {"core"}


# The kit's own distribution: a module of it may not import the model, the drills or the
# load tests (they are extras: `cronfleet[sim]`, `[chaos]`, `[loadtest]`).
PROOF_PACKAGES = ("sim", "chaos", "loadtest", "benchmarks")


def proof_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        found += [
            f"line {node.lineno}: imports {n}" for n in names if n.split(".")[0] in PROOF_PACKAGES
        ]
    return found


def test_no_module_of_the_kit_imports_the_model_the_drills_or_the_load_tests():
    problems = {
        str(p.relative_to(ROOT)): v
        for p in _modules(ROOT / "kit")
        if (v := proof_imports(p.read_text()))
    }
    assert problems == {}


@pytest.mark.parametrize(
    ("source", "bad"),
    [("from sim.scenario import x", True), ("import chaos.cli", True), ("import kit.api", False)],
)
def test_proof_import_rule(source: str, bad: bool):
    assert bool(proof_imports(source)) is bad
