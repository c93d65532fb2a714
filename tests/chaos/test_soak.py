"""`cronfleet chaos soak` for 3 minutes (CI's soak; the long ones are in docs/chaos.md):
the steady mix runs through the random nemesis, the drills' auditor passes it, every
resource is sampled, and each gets its slope with an interval and a plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.soak import run_soak
from chaos.stack import ChaosStack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_three_minute_soak_is_audited_and_its_resources_trended(
    chaos_stack: ChaosStack, tmp_path: Path
) -> None:
    result, summary = run_soak(0.05, 10, 1012, tmp_path, chaos_stack, 30, 3, "test: soak 3 min")
    print("\n".join(result.notes))
    assert result.error is None, result.error
    assert result.audit is not None and result.passed
    assert result.audit.expected > 1000 and result.audit.lost == []
    assert len(result.history.faults) >= 5 if result.history else False
    assert summary["samples"] >= 50
    trends = summary["trends"]
    for resource in ("rss_mb:w1", "fds:api", "threads:reaper", "db_size_mb", "broker_lag"):
        assert resource in trends, sorted(trends)
        low, high = trends[resource]["ci95_per_h"]
        assert low <= trends[resource]["slope_per_h"] <= high
    out = tmp_path / "soak"
    assert (out / "soak.md").is_file() and list(out.glob("soak-*.png"))
    assert json.loads((out / "soak.json").read_text())["passed"] is True
    assert any("queue ack ok" in note for note in result.notes)
