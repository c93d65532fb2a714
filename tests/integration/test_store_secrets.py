"""Database errors never carry their bound parameters (task headers, payloads, a run's
error text): the engines hide them (issue 7, item 3)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from kit.store.db import engine_for

pytestmark = pytest.mark.integration

SECRET = "Bearer s3cr3t-t0ken-value"
ROOT = Path(__file__).resolve().parents[2]


def test_a_database_error_does_not_show_its_parameters(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine: Engine = engine_for(db_url, pool_size=1)
    try:
        with (
            caplog.at_level(logging.DEBUG),
            pytest.raises(DBAPIError) as caught,
            engine.connect() as conn,
        ):
            conn.execute(text("SELECT CAST(:secret AS text), 1 / 0"), {"secret": SECRET})
        assert "division by zero" in str(caught.value)
        assert SECRET not in str(caught.value)
        assert SECRET not in repr(caught.value)
        assert SECRET not in caplog.text
    finally:
        engine.dispose()


def test_every_engine_the_kit_creates_hides_parameters() -> None:
    """A static check, so a new create_engine cannot forget it."""
    missing = []
    for path in sorted((ROOT / "kit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(
                node.func, "id", getattr(node.func, "attr", None)
            ) in ("create_engine", "create_async_engine"):
                hides = any(
                    k.arg == "hide_parameters"
                    and isinstance(k.value, ast.Constant)
                    and k.value.value is True
                    for k in node.keywords
                )
                if not hides:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not missing, f"create_engine without hide_parameters=True: {missing}"
