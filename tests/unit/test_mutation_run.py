"""The mutation run's test list is derived from the imports, never kept by hand: a test
file judges the core modules it imports and every core module those use."""

from __future__ import annotations

from pathlib import Path

from scripts.mutation_run import core_imports, core_modules, judging_tests, reach


def test_every_import_form_of_a_core_module_is_found() -> None:
    source = (
        "import kit.core.leases\n"
        "from kit.core.retry import x\n"
        "from kit.core import trigger, not_a_module\n"
        "from kit.store import claims\n"
        "from .core import jitter\n"
    )
    modules = ["leases", "retry", "trigger", "jitter", "schedule"]
    assert core_imports(source, modules) == {"leases", "retry", "trigger"}


def test_a_module_is_judged_by_the_tests_of_the_modules_that_use_it(tmp_path: Path) -> None:
    core = tmp_path / "kit" / "core"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "base.py").write_text("X = 1\n")
    (core / "mid.py").write_text("from kit.core.base import X\n")
    (core / "top.py").write_text("from kit.core import mid\n")
    (core / "alone.py").write_text("Y = 2\n")
    unit = tmp_path / "tests" / "unit"
    unit.mkdir(parents=True)
    (unit / "test_top.py").write_text("from kit.core.top import mid\n")
    (unit / "test_alone.py").write_text("import kit.core.alone\n")
    (unit / "test_store.py").write_text("from kit.store import claims\n")
    assert core_modules(tmp_path) == ["alone", "base", "mid", "top"]
    assert reach(tmp_path)["top"] == {"top", "mid", "base"}
    assert judging_tests(["base"], tmp_path) == ["tests/unit/test_top.py"]
    assert judging_tests(["alone"], tmp_path) == ["tests/unit/test_alone.py"]
    assert judging_tests(["alone", "mid"], tmp_path) == [
        "tests/unit/test_alone.py",
        "tests/unit/test_top.py",
    ]


def test_every_core_module_has_a_test_that_judges_it() -> None:
    assert {m for m in core_modules() if not judging_tests([m])} == set()
