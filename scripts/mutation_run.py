"""mutmut over kit/core with its test list derived, not hand-kept: a module's mutants are
judged by the unit and property tests that import it, directly or through another
kit.core module that does (tests/unit and tests/property: pure, no stack). A new test
file that imports a core module judges it from its first run.

    python -m scripts.mutation_run tests MODULE...      # the tests that judge MODULEs
    python -m scripts.mutation_run changed               # kit/core modules a change touched
    python -m scripts.mutation_run run [--max-children N] [--modules a,b] [GLOB...]

`run` loads mutmut's configuration from pyproject.toml ([tool.mutmut]: what to mutate and
copy, the timeouts), puts the derived test list in it, and runs mutmut 3.8.1's `run`
in this process (its children are forks, which inherit the configuration). What "a
change touched": scripts/mutation.sh and docs/mutation.md.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "kit" / "core"
TEST_DIRS = ("tests/unit", "tests/property")


def core_modules(root: Path = ROOT) -> list[str]:
    return sorted(p.stem for p in (root / "kit" / "core").glob("*.py") if p.stem != "__init__")


def core_imports(source: str, modules: Iterable[str]) -> set[str]:
    """The kit.core modules a source imports (`import kit.core.x`, `from kit.core.x import`,
    `from kit.core import x`)."""
    known = set(modules)
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("kit.core.")}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.startswith("kit.core."):
                found.add(node.module.split(".")[2])
            elif node.module == "kit.core":
                found |= {a.name for a in node.names if a.name in known}
    return found & known


def reach(root: Path = ROOT) -> dict[str, set[str]]:
    """Core module -> the core modules it uses, itself and transitively."""
    modules = core_modules(root)
    direct = {
        m: core_imports((root / "kit" / "core" / f"{m}.py").read_text(), modules) for m in modules
    }
    out: dict[str, set[str]] = {}
    for m in modules:
        seen, todo = {m}, [m]
        while todo:
            for n in direct[todo.pop()] - seen:
                seen.add(n)
                todo.append(n)
        out[m] = seen
    return out


def judging_tests(targets: Iterable[str], root: Path = ROOT) -> list[str]:
    """The test files (relative paths) that judge the core modules `targets`: those that
    import one of them, or a core module that uses one."""
    wanted = set(targets)
    modules = core_modules(root)
    uses = reach(root)
    selected = []
    for directory in TEST_DIRS:
        for path in sorted((root / directory).glob("test_*.py")):
            imported = core_imports(path.read_text(), modules)
            used = set().union(*(uses[m] for m in imported)) if imported else set()
            if used & wanted:
                selected.append(str(path.relative_to(root)))
    return selected


def changed_core_modules(root: Path = ROOT) -> tuple[str, list[str]]:
    """(what the change is measured against, the kit/core modules it touched). CI runs on
    a clean clone of main, where there is no branch to compare with: the change is then
    the last commit (against its first parent, so a merge brings in its branch). With a
    main (`origin/main`, else `main`) that HEAD is not on, the change is the branch since
    it left main."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    base = ""
    head = git("rev-parse", "HEAD")
    for main in ("origin/main", "main"):
        if not git("rev-parse", "--verify", "-q", main):
            continue
        fork = git("merge-base", main, "HEAD")
        if fork and fork != head:
            base = fork
        break
    if not base:
        base = git("rev-parse", "--verify", "-q", "HEAD^1")
    if not base:
        return "", []  # a single commit, or no git: nothing to compare with
    names = git("diff", "--name-only", base, "HEAD", "--", "kit/core").splitlines()
    present = set(core_modules(root))
    touched = sorted({Path(n).stem for n in names if n.endswith(".py")} & present)
    return base, touched


def _run(args: argparse.Namespace) -> int:
    from mutmut import configuration

    modules = args.modules.split(",") if args.modules else core_modules()
    cfg = configuration._load_config()
    cfg.pytest_add_cli_args_test_selection = judging_tests(modules)
    configuration._config = cfg
    from mutmut.__main__ import cli

    globs = list(args.globs)
    if not globs and args.modules:
        globs = [f"kit.core.{m}.*" for m in modules]
    try:
        cli(["run", "--max-children", str(args.max_children), *globs], standalone_mode=False)
    except SystemExit as exc:  # survivors make mutmut exit non-zero: the report judges
        return int(exc.code or 0)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.mutation_run")
    sub = parser.add_subparsers(dest="command", required=True)
    tests = sub.add_parser("tests", help="the tests that judge the given core modules")
    tests.add_argument("modules", nargs="*")
    sub.add_parser("changed", help="the kit/core modules the change touched")
    run = sub.add_parser("run", help="mutmut run with the derived test list")
    run.add_argument("--max-children", type=int, default=2)
    run.add_argument("--modules", default="", help="comma-separated core modules (default all)")
    run.add_argument("globs", nargs="*", help="mutant names or globs (mutmut's)")
    args = parser.parse_args(argv)
    if args.command == "tests":
        print("\n".join(judging_tests(args.modules or core_modules())))
        return 0
    if args.command == "changed":
        base, touched = changed_core_modules()
        print(base)
        print(",".join(touched))
        return 0
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
