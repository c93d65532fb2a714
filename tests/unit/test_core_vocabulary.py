"""docs/vocabulary.md is the core's rendering of its closed sets, byte for byte: a core
test, so that mutation testing judges kit.core.vocabulary (tests/unit/test_vocabulary.py
holds the sets equal to the schema and the API as well)."""

from __future__ import annotations

from pathlib import Path

from kit.core.vocabulary import CLOSED_SETS, render_vocabulary

ROOT = Path(__file__).resolve().parents[2]


def test_the_vocabulary_page_is_the_cores_rendering() -> None:
    assert (ROOT / "docs" / "vocabulary.md").read_text() == render_vocabulary()


def test_every_closed_set_and_value_is_on_the_page() -> None:
    page = render_vocabulary()
    for closed in CLOSED_SETS:
        assert f"| {closed.name} |" in page
        for value in closed.values:
            assert f"`{value}`" in page
