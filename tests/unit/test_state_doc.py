"""docs/state-machine.md is rendered from the core's transition tables (kit.core.state_doc)."""

from __future__ import annotations

from pathlib import Path

from kit.core.leases import TRANSITIONS as LEASE_TRANSITIONS
from kit.core.state_doc import REGENERATE, render_state_doc
from kit.core.worker_run import TRANSITIONS, RunPhase

ROOT = Path(__file__).resolve().parents[2]


def test_state_machine_doc_is_generated_from_the_tables() -> None:
    committed = (ROOT / "docs" / "state-machine.md").read_text()
    assert committed == render_state_doc(), f"stale doc; run: {REGENERATE}"


def _section(title: str) -> str:
    text = render_state_doc()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_every_lease_rule_is_a_row_and_an_edge() -> None:
    section = _section("Run lease")
    for r in LEASE_TRANSITIONS:
        assert f"| {r.source.value} | {r.event} | {r.target.value} | {r.guard} |" in section
        assert f"    {r.source.value} --> {r.target.value}: {r.event}" in section
    for status in ("cancelled", "dead", "skipped", "succeeded"):
        assert f"    {status} --> [*]" in section


def test_the_run_in_a_worker_section_shows_every_rule_that_does_something() -> None:
    section = _section("A run in a worker")
    rows = [line for line in section.splitlines() if line.count(" | ") == 4]
    shown = [
        r
        for r in TRANSITIONS
        if r.effects or r.target is not r.source or r.guard.text != "otherwise"
    ]
    assert len(rows) == len(shown) + 2  # and the header and its rule
    assert (
        "| running | tick | now >= confirmed_until - fence margin | giving_back | cancel |" in rows
    )
    assert "| held | cancelled |  | done | free |" in rows
    assert "| done | tick, placed, begin, ended, heartbeat, beat_confirmed, beat_lost, " in section
    assert "| held | " not in section.split("events that change nothing")[1].split("Any other")[0]
    assert "    running --> stopping: tick, beat_lost\n" in section
    assert f"    [*] --> {RunPhase.held.value}: claimed\n" in section
