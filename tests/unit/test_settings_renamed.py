"""A renamed setting's old CRONFLEET_* name is still read for a release, with a warning;
the new name wins when both are set."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.settings import RENAMED, Settings, load_settings


@pytest.fixture(autouse=True)
def _no_stack_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CRONFLEET_HOME", str(tmp_path))  # no stack.env to read


def test_the_old_name_is_read_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONFLEET_UNDISPATCHED_GRACE_MS", "20000")
    with pytest.warns(DeprecationWarning, match="CRONFLEET_UNCLAIMED_GRACE_MS"):
        settings = load_settings()
    assert settings.unclaimed_grace_ms == 20_000


def test_the_new_name_wins_over_the_old(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONFLEET_UNDISPATCHED_GRACE_MS", "20000")
    monkeypatch.setenv("CRONFLEET_UNCLAIMED_GRACE_MS", "25000")
    with pytest.warns(DeprecationWarning):
        assert load_settings().unclaimed_grace_ms == 25_000


def test_an_old_keyword_is_moved_too() -> None:
    with pytest.warns(DeprecationWarning):
        assert load_settings(undispatched_grace_ms=30_000).unclaimed_grace_ms == 30_000


def test_every_new_name_is_a_setting() -> None:
    fields = Settings.model_fields
    assert all(new in fields and old not in fields for old, new in RENAMED.items())
