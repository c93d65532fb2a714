"""A team's schedule mix read from a file (sim/mix.py) and sized for (`cronfleet sim size
--mix`): counts kept per expression and zone, an export of GET /v1/jobs counted, mistakes
named, the day's windows found from it, midnight and a top of the hour among them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sim.cli import busiest_top_of_hour
from sim.mix import cron_population, mix_scenario_text, read_mix
from sim.scenario import ScenarioError, load_scenario
from sim.workload import WorkloadStream, due_per_second

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_MIX = ROOT / "terraform/examples/top-of-hour/schedules.toml"

TOML = """
[[schedules]]
cron = "0 0 * * *"
timezone = "UTC"
count = 600
jitter_s = 60

[[schedules]]
cron = "0 0 * * *"
timezone = "America/New_York"
count = 300
jitter_s = 60

[[schedules]]
cron = "*/15 * * * *"
count = 90

[[schedules]]
every_s = 300
anchor = "2026-03-08T00:00:30Z"
count = 10
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _jobs_by_template(path: Path, tmp_path: Path) -> Counter[tuple[str, str]]:
    scenario = _write(tmp_path, "s.toml", mix_scenario_text(read_mix(path), str(path)))
    stream = WorkloadStream(load_scenario(str(scenario)), 0)
    out: Counter[tuple[str, str]] = Counter()
    for t in stream.templates:
        out[(t.expr or type(t.schedule).__name__, t.zone)] += t.jobs
    return out


def test_counts_per_expression_and_zone_are_the_populations(tmp_path: Path) -> None:
    jobs = _jobs_by_template(_write(tmp_path, "mix.toml", TOML), tmp_path)
    assert jobs == {
        ("0 0 * * *", "UTC"): 600,
        ("0 0 * * *", "America/New_York"): 300,
        ("*/15 * * * *", "UTC"): 90,
        ("IntervalSchedule", ""): 10,
    }


def test_an_export_of_get_v1_jobs_is_counted(tmp_path: Path) -> None:
    def job(i: int, schedule: dict, **more: object) -> dict:
        return {"job_id": f"j{i}", "name": f"n{i}", "schedule": schedule, **more}

    page1 = {
        "jobs": [
            job(1, {"cron": "0 9 * * *", "timezone": "Europe/Paris"}, jitter_s=30),
            job(2, {"cron": "0 9 * * *", "timezone": "Europe/Paris"}, jitter_s=30),
            job(3, {"cron": "0 9 * * *", "timezone": "Europe/Paris"}, paused=True),
        ],
        "next_cursor": "x",
    }
    page2 = {
        "jobs": [
            job(4, {"at": "2030-01-01T00:00:00Z"}),
            job(5, {"every_s": 60, "anchor": "2026-01-01T00:00:00Z"}),
        ]
    }
    for text in (
        json.dumps([page1, page2]),  # a list of pages
        json.dumps(page1) + "\n" + json.dumps(page2) + "\n",  # one page per line
    ):
        mix = read_mix(_write(tmp_path, "jobs.json", text))
        assert mix.schedules == 3
        assert mix.left_out == {"paused": 1, "one-off (at)": 1}
        population = cron_population(mix)
        paris = next(c for c in population["cron"] if c.get("cron") == "0 9 * * *")
        assert paris["zones"] == {"Europe/Paris": 1.0} and paris["jitter_s"] == 30
        assert paris["share"] == pytest.approx(2 / 3)
        assert sum(c["share"] for c in population["cron"]) == pytest.approx(1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[schedules]]\ncron = "0 0 * * *"\ncount = -1\n', "mix.schedules.0.count"),
        ('[[schedules]]\ncron = "0 0 * * *"\nevery_s = 60\ncount = 1\n', "exactly one"),
        ('[[schedules]]\ncron = "0 0 * * *"\ncount = 1\njitter_s = 9999\n', "jitter_s"),
        ("[other]\n", "mix.schedules"),
        ('[[schedules]]\ncron = "0 0 * * *"\ncount = 0\n', "no schedule"),
    ],
)
def test_a_bad_mix_names_the_entry(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        read_mix(_write(tmp_path, "bad.toml", text))


def test_a_bad_expression_or_zone_is_refused_by_the_kits_parsers(tmp_path: Path) -> None:
    for bad in ('cron = "61 * * * *"', 'cron = "0 0 * * *"\ntimezone = "Mars/Olympus"'):
        path = _write(tmp_path, "m.toml", f"[[schedules]]\n{bad}\ncount = 5\n")
        scenario = _write(tmp_path, "s.toml", mix_scenario_text(read_mix(path), "m"))
        with pytest.raises(ScenarioError, match=r"workload\.cron\.0"):
            load_scenario(str(scenario))


def test_due_per_second_keeps_every_run_of_a_fire_without_jitter(tmp_path: Path) -> None:
    """A fire whose jobs all fall in one second counts them once (it counted them a
    thousand times over: its 1 ms spread as a rate per second)."""
    path = _write(tmp_path, "m.toml", '[[schedules]]\ncron = "0 * * * *"\ncount = 500\n')
    scenario = _write(tmp_path, "s.toml", mix_scenario_text(read_mix(path), "m"))
    per_s = due_per_second(WorkloadStream(load_scenario(str(scenario)), 0))
    assert per_s.sum() == pytest.approx(500 * 24)
    assert per_s.max() == pytest.approx(500)


def test_the_top_of_hour_window_is_another_than_the_busiest() -> None:
    from datetime import UTC, datetime

    per_s = np.zeros(4 * 3600)
    per_s[0:60] = 100.0  # midnight: taken already
    per_s[3600:3610] = 10.0
    per_s[7200:7230] = 20.0  # the busiest other top of an hour
    start = datetime(2026, 3, 8, tzinfo=UTC)
    assert busiest_top_of_hour(per_s, 60, start, [0]) == (7190, 600.0)
    assert busiest_top_of_hour(np.zeros(7200), 60, start, []) is None


def test_the_examples_mix_is_the_requirements_day() -> None:
    """The top-of-hour example is sized from schedules.toml: 10 M schedules, the day
    scenario's classes in its zones."""
    mix = read_mix(EXAMPLE_MIX)
    assert mix.schedules == 10_000_000
    day = load_scenario("day")
    crons = {shape.cron for shape in mix.counts}
    assert crons == {c["cron"] for c in day["workload"]["cron"]}
    assert {shape.timezone for shape in mix.counts} == set(day["workload"]["zones"])


@pytest.mark.slow
def test_sim_size_mix_writes_the_sizing_for_the_mix(tmp_path: Path) -> None:
    mix = _write(tmp_path, "mix.toml", TOML)
    out = tmp_path / "sizing.auto.tfvars"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit.cli",
            "sim",
            "size",
            "--mix",
            str(mix),
            "--target-p99-start",
            "2s",
            "--window-s",
            "30",
            "--set",
            "fleet.workers=2",
            "--set",
            "fleet.partitions=64",
            "--quiet",
            "--emit-tfvars",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1,000 schedules in 4 shapes" in run.stderr
    assert "(top of hour)" in run.stderr  # checked besides the busiest windows
    header = out.read_text().splitlines()[0]
    assert f"--mix {mix}" in header and "1,000 schedules" in header
    assert (tmp_path / "mix.scenario.toml").exists()  # replayable with `cronfleet sim`
