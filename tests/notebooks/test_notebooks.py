"""Every notebook in notebooks/ runs top to bottom at a small size
(CRONFLEET_NOTEBOOK_SIZE=small) and fails on any error; each opens with a question and
closes with an answer, and is committed with the outputs of a full run."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "notebooks"))

pytestmark = pytest.mark.slow


def test_the_three_notebooks_exist() -> None:
    assert {p.name for p in NOTEBOOKS} == {
        "capacity-planning.ipynb", "failure-budget.ipynb", "model-vs-real.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_question_at_the_top_answer_at_the_bottom_outputs_committed(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "**Question.**" in first.source
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "commit it with the outputs of a full run"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)
    assert any("**Answer.**" in str(o.get("data", {}).get("text/markdown", ""))
               for o in code[-1].outputs), "the last cell displays the answer"
    assert any("size: full" in str(o.get("text", "")) for c in code for o in c.outputs), (
        "the committed outputs come from a full-size run")
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), "no plot"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_at_a_small_size(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from build_notebooks import execute

    monkeypatch.setenv("CRONFLEET_NOTEBOOK_SIZE", "small")
    committed = nbformat.read(path, as_version=4)
    nb = execute(nbformat.read(path, as_version=4), timeout_s=600)  # raises on any error
    code = [c for c in nb.cells if c.cell_type == "code"]
    # every cell ran in this run, in order, and the kernel read the small size (the
    # committed outputs say "size: full": they are not what is checked here)
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert [o.get("text") for o in code[0].outputs] == ["size: small\n"]
    answer = [str(o.get("data", {}).get("text/markdown", "")) for o in code[-1].outputs]
    assert any(a.startswith("**Answer.**") for a in answer), "the last cell gives the answer"
    full = [
        str(o.get("data", {}).get("text/markdown", ""))
        for c in committed.cells
        if c.cell_type == "code"
        for o in c.outputs
    ]
    assert [a for a in answer if a.startswith("**Answer.**")] != [
        a for a in full if a.startswith("**Answer.**")
    ], "the small run's answer is the committed full-size one: was anything computed?"
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), "no plot"
