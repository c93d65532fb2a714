"""The crash suite borrows the integration suite's database fixtures (a fresh database
per test, cloned from a template migrated once per session) and runs on its stack."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import (  # noqa: F401  (fixtures)
    _drop_test_topics,
    admin_engine,
    db_url,
    engine,
    template_db,
)


@pytest.fixture
def out_dir() -> Iterator[Path]:
    """The fleet's logs, journals and effect ledger, where its tasks can reach them: under
    a root worker they run as `nobody`, who may not enter pytest's own temporary
    directory (0700). Under the system's temporary directory, 0755, removed after."""
    path = Path(tempfile.mkdtemp(prefix="cronfleet-crash-"))
    path.chmod(0o755)
    yield path
    if os.environ.get("CRONFLEET_CRASH_KEEP"):  # the services' logs, to read a failure
        print(f"crash suite's logs kept in {path}")
        return
    shutil.rmtree(path, ignore_errors=True)
