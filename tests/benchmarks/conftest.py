"""What the benchmarks' small runs need: the local stack (each script makes and drops its
own scratch databases and topics on it), a migrated database of their own for the scripts
that serve the API from the stack's database, the Go ledger, and a check that none of
them wrote into the repository's kept results, docs or profiles."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from kit.settings import load_settings
from kit.store.scratch import drop_database, migrated_database

REPO = Path(__file__).resolve().parents[2]
LEDGER = REPO / "loadtest" / "ledger" / "bin" / "ledger"
# what a benchmark may read but never write (a small run's output goes to tmp_path)
KEPT = ("benchmarks/results", "docs", "sim/profiles")
_counter = itertools.count()


def scratch_name(what: str) -> str:
    """A database name of this session alone (the pid in it)."""
    return f"cf_bench_t_{os.getpid()}_{what}_{next(_counter)}"


def _files(roots: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    out = {}
    for root in roots:
        for path in (REPO / root).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                st = path.stat()
                out[str(path.relative_to(REPO))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module", autouse=True)
def kept_files_untouched() -> Iterator[None]:
    """Every benchmark here writes under tmp_path: the kept series, the docs and the
    model's profiles are as they were after the module."""
    before = _files(KEPT)
    yield
    after = _files(KEPT)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a benchmark wrote into the repository: {changed}"


@pytest.fixture(scope="module")
def admin_url() -> str:
    """The stack's own database URL (the scripts' admin connection)."""
    import psycopg

    from kit.store.scratch import pg_url

    url = load_settings().database_url
    try:
        with psycopg.connect(pg_url(make_url(url)), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        pytest.fail(f"the local stack is not up: run `cronfleet stack up` ({exc})", pytrace=False)
    return url


@pytest.fixture(scope="module")
def api_env(admin_url: str) -> Iterator[dict[str, str]]:
    """CRONFLEET_DATABASE_URL of a migrated database of this module: the API benchmarks
    serve `cronfleet api` from the stack's database and the suites mint their tokens
    there, so here it is one of their own, not the stack's."""
    with migrated_database(make_url(admin_url), scratch_name("api")) as db:
        yield {"CRONFLEET_DATABASE_URL": db.render_as_string(hide_password=False)}


@pytest.fixture
def kept_database(admin_url: str) -> Iterator[str]:
    """A name for a database a benchmark keeps (--keep), dropped after the test."""
    name = scratch_name("kept")
    yield name
    drop_database(make_url(admin_url), name)


@pytest.fixture(scope="module")
def ledger() -> Path:
    """The Go ledger the http tasks call (scripts/build_ledger.sh, as scripts/test.sh)."""
    if not LEDGER.exists():
        subprocess.run(["bash", "scripts/build_ledger.sh"], cwd=REPO, check=True, timeout=600)
    return LEDGER


@pytest.fixture(scope="module")
def python_on_path(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PATH with `python` first as this interpreter, for the shell scripts that call it."""
    bin_dir = tmp_path_factory.mktemp("bin")
    (bin_dir / "python").symlink_to(sys.executable)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
