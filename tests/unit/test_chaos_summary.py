"""`cronfleet chaos summary`: drills run apart (a 100-cycle series takes hours) summed up
in one table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _result(drill: str, passed: bool, lost: int) -> dict:
    audit = {
        "expected": 100,
        "expected_poison": 0,
        "faults": 10,
        "effects": 100 - lost,
        "lost": lost,
        "duplicate_effects": 0,
        "stale_writes_accepted": 0,
        "unexpected_effects": 0,
        "unexpected_runs": 0,
        "duplicate_deliveries": 3,
        "duplicate_executions": 3,
        "writes_checked": {"finish": 90},
        "lag_during": {"p99_s": 1.5},
        "lag_after": {"p99_s": 0.2},
        "recover_s_median": 1.0,
        "recover_s_max": 2.0,
    }
    return {"drill": drill, "cycles": 100, "passed": passed, "wall_s": 60.0, "audit": audit}


def _summary(tmp_path: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "sum"
    return subprocess.run(
        [sys.executable, "-m", "kit.cli", "chaos", "summary", *map(str, files), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_runs_made_apart_make_one_table_with_their_seeds_and_commits(tmp_path: Path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(
        json.dumps(
            {
                "seed": 100,
                "cycles": 100,
                "commit": "abc",
                "drills": [_result("worker-kill", True, 0)],
            }
        )
    )
    b.write_text(json.dumps({"seed": 7, "cycles": 100, "drills": [_result("kafka-kill", True, 0)]}))
    p = _summary(tmp_path, a, b)
    assert p.returncode == 0, p.stderr
    md = (tmp_path / "sum" / "summary.md").read_text()
    assert "| worker-kill | 100 |" in md and "| kafka-kill | 100 |" in md
    assert "seed 100 / 7" in md and "abc / unrecorded" in md
    assert (tmp_path / "sum" / "summary.png").exists()


def test_a_failed_drill_fails_the_summary_and_a_bad_file_is_named(tmp_path: Path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"seed": 1, "cycles": 5, "drills": [_result("random", False, 2)]}))
    assert _summary(tmp_path, a).returncode == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    p = _summary(tmp_path, bad)
    assert p.returncode == 2 and "results" in p.stderr and "bad.json" in p.stderr
