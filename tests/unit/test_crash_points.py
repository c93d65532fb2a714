"""The crash points (kit.core.crash_points, kit.crash): the table and the code name the same
points, every multi-step write of the run path names one, and an armed point kills its
process with SIGKILL at the point and nowhere else. The kills themselves, and what the
fleet makes of them: tests/crash/."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.core.crash_points import (
    CRASH_POINTS,
    NAMES,
    SERVICES,
    parse_crash_at,
    points_of,
    render_table,
)
from kit.core.errors import FieldError

ROOT = Path(__file__).resolve().parents[2]

# Where the run path's writes live: the services and the store, less the modules only the
# HTTP API's request handlers write through (a request is one transaction; its crash
# fails the request, which the client repeats with its Idempotency-Key). The pull
# queue's store is the API's too, and it is in: a worker's ack is the run of its task.
SCANNED = ("kit/scheduler", "kit/worker", "kit/reaper", "kit/maintenance", "kit/store")
API_ONLY = frozenset(
    {
        "kit/store/audit.py",
        "kit/store/backfill.py",
        "kit/store/cli.py",
        "kit/store/cli_tokens.py",
        "kit/store/console_sessions.py",
        "kit/store/console_views.py",  # the console's reads, and its replay of dead tasks
        "kit/store/dead_letters.py",  # replay; dead_letter_in runs in a finish's transaction
        "kit/store/explain.py",
        "kit/store/fleet.py",
        "kit/store/jobs.py",
        "kit/store/jobs_list.py",
        "kit/store/run_cancel.py",
        "kit/store/run_detail.py",  # the run page's read (one snapshot)
        "kit/store/runs.py",
        "kit/store/tenants.py",
        "kit/store/tokens.py",
    }
)
# Multi-step writes of the run path left without a point, each with its reason.
WITHOUT_POINT = {
    "kit/store/claims.py:run_finish_cancelled": (
        "a run whose job was deleted before its claim; the crash suite deletes no job"
    ),
    "kit/store/durations.py:job_durations_refresh": (
        "one read, then one write: nothing between two writes to lose; the next refresh "
        "measures again"
    ),
    "kit/store/queues.py:_within_max_queued": "a lock and a count: no write",
    "kit/store/queues.py:_enqueue": (
        "the max_queued lock and count only read before the one insert (then a read of "
        "an earlier use of the key): nothing between two writes to lose"
    ),
    "kit/store/queues.py:_enqueue_many": (
        "the max_queued lock and count only read before the one insert"
    ),
    "kit/store/switches.py:switch_off": (
        "the operator's command, one transaction: the switch row and its audit entry "
        "commit together or not at all, and a crash is answered by running it again"
    ),
    "kit/store/switches.py:switch_on": (
        "the operator's command, one transaction: the switch row's delete, the held runs "
        "the misfire policy skips and the audit entry commit together or not at all; the "
        "kept runs are published by the reaper's lost-run rule, whose crashes the suite "
        "already covers"
    ),
}


@dataclass(frozen=True)
class Write:
    where: str  # path:qualified name
    statements: int
    names_point: bool


def _calls_point(node: ast.AST) -> set[str]:
    """The literal names of crash_point calls under `node`."""
    found = set()
    for call in ast.walk(node):
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "crash_point"
            and call.args
            and isinstance(call.args[0], ast.Constant)
        ):
            found.add(str(call.args[0].value))
    return found


def _called_names(node: ast.AST) -> set[str]:
    out = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            if isinstance(call.func, ast.Name):
                out.add(call.func.id)
            elif isinstance(call.func, ast.Attribute):
                out.add(call.func.attr)
    return out


def _statements(body: list[ast.stmt], conn: str, helpers: dict[str, ast.AST], depth: int) -> int:
    """Statements a transaction's body sends on `conn`: conn.execute(...), and calls that
    hand `conn` on (a helper of this module counts as the statements it sends)."""
    count = 0
    for stmt in body:
        for call in ast.walk(stmt):
            if not isinstance(call, ast.Call):
                continue
            func = call.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in ("execute", "exec_driver_sql")
                and isinstance(func.value, ast.Name)
                and func.value.id == conn
            ):
                count += 1
                continue
            if not any(isinstance(a, ast.Name) and a.id == conn for a in call.args):
                continue
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name[:1].isupper():
                continue  # a class made with the connection (IdleGuard), not a statement
            helper = helpers.get(name)
            if helper is not None and depth < 3 and isinstance(helper, ast.FunctionDef):
                first = helper.args.args[0].arg if helper.args.args else conn
                count += max(1, _statements(helper.body, first, helpers, depth + 1))
            else:
                count += 1
    return count


def _steps_yields(func: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Statements a step generator (kit.store.pg_async: annotated `-> Steps[...]`) yields;
    a `yield from` another step function counts as one."""
    if func.returns is None or "Steps" not in ast.unparse(func.returns):
        return 0
    return sum(isinstance(n, ast.Yield | ast.YieldFrom) for n in ast.walk(func))


def _standalone_steps(tree: ast.Module) -> set[str]:
    """Step functions every caller runs with atomic=False (each statement its own
    transaction): no multi-step write."""
    atomic: dict[str, set[bool]] = {}
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            continue
        if call.func.id not in ("run_steps", "run_steps_async") or len(call.args) < 2:
            continue
        steps = call.args[1]
        if not (isinstance(steps, ast.Call) and isinstance(steps.func, ast.Name)):
            continue
        flag = next((k.value for k in call.keywords if k.arg == "atomic"), None)
        standalone = isinstance(flag, ast.Constant) and flag.value is False
        atomic.setdefault(steps.func.id, set()).add(not standalone)
    return {name for name, kinds in atomic.items() if kinds == {False}}


def multi_step_writes(path: Path) -> Iterator[Write]:
    """Every function of `path` that opens a transaction sending more than one statement
    (a `with x.begin() as conn` block, or a step generator run atomically), and whether
    it (or a helper of its module it calls) names a crash point."""
    tree = ast.parse(path.read_text())
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    functions: dict[str, ast.AST] = {}
    qualified: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions[node.name] = node
            qualified.append((node.name, node))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    functions.setdefault(item.name, item)
                    qualified.append((f"{node.name}.{item.name}", item))
    standalone = _standalone_steps(tree)

    def names_point(func: ast.AST, seen: frozenset[int] = frozenset()) -> bool:
        """It names a point, or a helper of this module it calls does (at any depth)."""
        if _calls_point(func):
            return True
        seen = seen | {id(func)}
        return any(
            names_point(functions[n], seen)
            for n in _called_names(func)
            if n in functions and id(functions[n]) not in seen
        )

    for name, func in qualified:
        statements = 0
        for node in ast.walk(func):
            if isinstance(node, ast.With | ast.AsyncWith):
                for item in node.items:
                    call = item.context_expr
                    if (
                        isinstance(call, ast.Call)
                        and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "begin"
                        and isinstance(item.optional_vars, ast.Name)
                    ):
                        conn = item.optional_vars.id
                        statements = max(statements, _statements(node.body, conn, functions, 0))
        if name not in standalone and _steps_yields(func) >= 2:
            statements = max(statements, _steps_yields(func))
        if statements >= 2:
            yield Write(f"{rel}:{name}", statements, names_point(func))


def _scanned_modules() -> list[Path]:
    out = []
    for directory in SCANNED:
        for path in sorted((ROOT / directory).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel not in API_ONLY and "/migrations/" not in rel:
                out.append(path)
    return out


def test_every_multi_step_write_of_the_run_path_names_a_crash_point() -> None:
    writes = [w for p in _scanned_modules() for w in multi_step_writes(p)]
    assert len(writes) >= 10, "the scan found too few transactions: is the rule still right?"
    missing = sorted(w.where for w in writes if not w.names_point and w.where not in WITHOUT_POINT)
    assert missing == [], (
        "multi-step writes without a crash point (add one, kit.core.crash_points, and to "
        f"the crash suite; or say in WITHOUT_POINT why not): {missing}"
    )
    found = {w.where for w in writes}
    assert set(WITHOUT_POINT) <= found, "WITHOUT_POINT names a write that is no longer one"


def test_the_rule_sees_a_transaction_split_from_its_point(tmp_path: Path) -> None:
    """A function that commits two statements with no crash point is flagged; with one, not."""
    bare = (
        "def f(engine):\n"
        "    with engine.begin() as conn:\n"
        "        conn.execute(a)\n"
        "        helper(conn, b)\n"
    )
    pointed = bare + "        crash_point('x')\n"
    steps = "def g(p) -> Steps[int]:\n    rows = yield Query(a, {})\n    yield Execute(b, {})\n"
    for source, flagged in ((bare, True), (pointed, False), (steps, True)):
        path = tmp_path / "probe.py"
        path.write_text(source)
        writes = list(multi_step_writes(path))
        assert [not w.names_point for w in writes] == [flagged], source


def _call_sites() -> dict[str, list[str]]:
    sites: dict[str, list[str]] = {}
    for path in sorted((ROOT / "kit").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for call in ast.walk(tree):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "crash_point"
            ):
                first = call.args[0] if call.args else None
                assert isinstance(first, ast.Constant), f"{path}:{call.lineno}: name a literal"
                sites.setdefault(str(first.value), []).append(f"{path.name}:{call.lineno}")
    return sites


def test_the_table_and_the_call_sites_name_the_same_points_once_each() -> None:
    sites = _call_sites()
    assert set(sites) == NAMES
    assert {n: s for n, s in sites.items() if len(s) != 1} == {}
    assert len(NAMES) == len(CRASH_POINTS)
    assert {p.service for p in CRASH_POINTS} == set(SERVICES)


def test_points_of_a_service_in_table_order() -> None:
    assert points_of("reaper") == (
        "reap.dead_written",
        "reap.requeued",
        "reap.published",
        "republish.orphans_released",
        "republish.published",
    )
    with pytest.raises(ValueError) as refused:
        points_of("nobody")
    assert str(refused.value) == "service: one of scheduler, worker, reaper, maintenance, api"


def test_the_docs_list_every_point() -> None:
    """docs/testing.md carries the table `python -m kit.core.crash_points` prints."""
    doc = (ROOT / "docs" / "testing.md").read_text()
    table = render_table()
    assert table.startswith("| point | service | a crash there leaves |\n| --- | --- | --- |\n")
    assert table.count("\n") == len(CRASH_POINTS) + 2
    assert table in doc
    assert {n for n in NAMES if f"`{n}`" not in doc} == set()


@pytest.mark.parametrize(
    ("text", "armed"),
    [
        ("", None),
        ("  ", None),
        ("scan.committed", ("scan.committed", 1)),
        ("scan.committed:3", ("scan.committed", 3)),
        (" reap.published:1 ", ("reap.published", 1)),
    ],
)
def test_the_setting_names_a_point_and_a_passage(text: str, armed: tuple[str, int] | None) -> None:
    assert parse_crash_at(text) == armed


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("scan.comitted", "'scan.comitted' is not a crash point"),
        ("scan.committed:0", "'0' after ':' must be a count of at least 1"),
        ("scan.committed:x", "'x' after ':' must be a count of at least 1"),
        ("scan.committed:", "'' after ':' must be a count of at least 1"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(text: str, reason: str) -> None:
    with pytest.raises(FieldError) as refused:
        parse_crash_at(text)
    assert (refused.value.field, refused.value.reason.split(" (")[0]) == (
        "CRONFLEET_CRASH_AT",
        reason.split(" (")[0],
    )


_PROBE = """
import sys
from kit.crash import crash_point
for i in range(5):
    crash_point("scan.committed", i % 2 == 0)  # passages at i = 0, 2, 4
    crash_point("reap.published")
    print("after", i, flush=True)
"""


def _probe(setting: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CRONFLEET_CRASH_AT"}
    env["PYTHONPATH"] = str(ROOT)
    if setting is not None:
        env["CRONFLEET_CRASH_AT"] = setting
    return subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60
    )


def test_unarmed_points_do_nothing() -> None:
    done = _probe(None)
    assert done.returncode == 0
    assert done.stdout.split("\n")[:-1] == [f"after {i}" for i in range(5)]


def test_an_armed_point_kills_its_process_at_its_nth_passage() -> None:
    done = _probe("scan.committed:2")  # the second true passage: i = 2
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split("\n")[:-1] == ["after 0", "after 1"]
    assert "crash point scan.committed reached (passage 2): SIGKILL" in done.stderr
    first = _probe("reap.published")
    assert first.returncode == -signal.SIGKILL and first.stdout == ""


def test_a_misspelt_setting_stops_the_process_before_it_runs() -> None:
    done = _probe("reap.publish")
    assert done.returncode == 1
    assert "CRONFLEET_CRASH_AT: 'reap.publish' is not a crash point" in done.stderr
