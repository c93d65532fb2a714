"""cronfleet calibrate's arithmetic on the scan it measures: per-fire costs are the slopes
over batch sizes, split into the scheduler's own CPU and the database's wait, per schedule
kind (the cron kind weighted by the top-of-hour window's job classes); a cost that comes
out negative is refused (not floored); a full calibration keeps the storm's keys of the
profile it replaces."""

from __future__ import annotations

import datetime as dt

import pytest

from kit.core.schedule import ScheduleKind, parse_schedule, schedule_kind
from sim.calibrate import (
    JOB_CLASSES,
    PEAK_SHARES,
    SCAN_CALLS,
    ScanSample,
    _fit_raw,
    _job_rows,
    _scan_numbers,
    carried_over,
    class_kind,
    write_profile,
)
from sim.scenario import scan_cost_keys

# per class: (CPU per fire, runs_insert wait per fire, other wait per fire), seconds
TRUE = {
    "hourly": (200e-6, 30e-6, 50e-6),
    "minute": (150e-6, 30e-6, 40e-6),
    "sparse": (300e-6, 30e-6, 60e-6),
    "interval": (90e-6, 28e-6, 45e-6),
    "one_off": (60e-6, 27e-6, 20e-6),
}
CRON_CLASSES = ("hourly", "minute", "sparse")


def _sample(job_class: str, n: int) -> ScanSample:
    cpu_f, ins_f, other_f = TRUE[job_class]
    wall = dict.fromkeys(SCAN_CALLS, 0.0)
    cpu = dict.fromkeys(SCAN_CALLS, 0.0)
    wall["runs_insert"], cpu["runs_insert"] = 0.001 + n * ins_f + n * 5e-6, n * 5e-6
    wall["triggers_due"] = 0.002 + n * other_f
    total_cpu = 0.001 + n * cpu_f
    wall_s = total_cpu + (wall["runs_insert"] - cpu["runs_insert"]) + wall["triggers_due"] + 0.003
    return ScanSample(job_class, n, n, wall_s, total_cpu, wall, cpu)


def _claims() -> dict:
    pts = [(n, 0.002 + n * 40e-6, n * 10e-6) for n in (50, 200, 1000)]
    return {"one_claim": [0.002] * 5, "one_finish": [0.003] * 5, "claim": pts, "finish": pts}


def _samples() -> list[ScanSample]:
    return [_sample(c, n) for c in JOB_CLASSES for n in (250, 1000, 4000)]


EMPTY = [(k, 0.004 + k * 3e-6 + 0.0005, 0.0005) for k in (16, 64, 256, 1024)]


def test_fit_is_plain_least_squares_and_keeps_its_sign():
    assert _fit_raw([(0, 1.0), (10, 3.0), (20, 5.0)]) == pytest.approx((1.0, 0.2))
    assert _fit_raw([(0, 5.0), (10, 3.0)])[1] == pytest.approx(-0.2)


def test_each_class_is_of_one_kind_and_every_kind_is_measured():
    assert {c: class_kind(c) for c in JOB_CLASSES} == {
        "hourly": "cron",
        "minute": "cron",
        "sparse": "cron",
        "interval": "interval",
        "one_off": "one_off",
    }
    assert set(PEAK_SHARES) == set(CRON_CLASSES)


def test_the_jobs_written_carry_their_classs_schedule_as_the_kit_parses_it():
    """What the scan reads back (jobs.schedule) parses to the class's kind; a one-off's
    `at` is its trigger's fire time, so the scan fires it once and leaves no trigger."""
    import json
    import random

    fire = dt.datetime(2030, 1, 7, 0, 0, 11, 250_000, tzinfo=dt.UTC)
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for c in JOB_CLASSES:
        rows = _job_rows(c, [fire] * 9, random.Random(1), 0)
        parsed = [parse_schedule(json.loads(r[3]), now) for r in rows]
        assert {schedule_kind(x).value for x in parsed} == {class_kind(c)}
        if c == "one_off":
            assert {x.at for x in parsed} == {fire}  # type: ignore[union-attr]


def test_scan_costs_split_cpu_from_the_database_per_kind_and_weigh_the_peak():
    numbers, detail = _scan_numbers(_samples(), EMPTY, _claims(), 0.0005)
    cpu, adv, ins = scan_cost_keys("cron")
    peak_cpu = sum(PEAK_SHARES[c] * TRUE[c][0] for c in CRON_CLASSES)
    assert numbers[cpu] == pytest.approx(peak_cpu)
    assert detail["per_class"]["sparse"]["cpu_per_fire"] == pytest.approx(300e-6)
    # the database's wait per fire: the insert's, and the rest (the trigger's advance)
    peak_ins = sum(PEAK_SHARES[c] * TRUE[c][1] for c in CRON_CLASSES)
    peak_adv = sum(PEAK_SHARES[c] * TRUE[c][2] for c in CRON_CLASSES)
    assert numbers[ins] == pytest.approx(peak_ins)
    assert numbers[adv] == pytest.approx(peak_adv)
    # a kind of one class is that class, not weighed with the others
    for kind in ("interval", "one_off"):
        cpu, adv, ins = scan_cost_keys(kind)
        assert numbers[cpu] == pytest.approx(TRUE[kind][0])
        assert numbers[ins] == pytest.approx(TRUE[kind][1])
        assert numbers[adv] == pytest.approx(TRUE[kind][2])
    assert {k for k in numbers if "per_fire" in k or "per_row" in k} == {
        key for kind in ScheduleKind for key in scan_cost_keys(kind)
    }
    assert numbers["db_per_partition_s"] == pytest.approx(3e-6)
    assert numbers["db_scan_fixed_s"] == pytest.approx(0.004)
    assert numbers["db_claim_demand_s"] == pytest.approx(30e-6)  # wall less the worker's CPU
    assert numbers["claim_s"] == 0.002 and numbers["finish_s"] == 0.003


def test_a_negative_cost_is_refused_not_floored():
    samples = _samples()
    for s in samples:  # a scan that waits less the more it fires: the method is wrong
        s.call_wall["runs_insert"] = 1.0 - s.fires * 1e-4
    with pytest.raises(RuntimeError, match="db_run_insert_per_row_cron_s"):
        _scan_numbers(samples, EMPTY, _claims(), 0.0005)


def test_a_full_calibration_keeps_the_storm_keys_and_their_note(tmp_path):
    old = {
        "service_times": {"storm_other_cpu_per_s": 0.16, "worker_wheel_pop_s": 1e-6, "claim_s": 1},
        "history": {},
        "measured": {"storm_cpu": "from a storm", "worker_starts": "w", "scan": "old"},
    }
    numbers, notes = carried_over(old, keep_worker_starts=False)
    assert numbers == {"storm_other_cpu_per_s": 0.16} and notes == {"storm_cpu": "from a storm"}
    numbers, notes = carried_over(old, keep_worker_starts=True)
    assert set(numbers) == {"storm_other_cpu_per_s", "worker_wheel_pop_s"}
    assert notes == {"storm_cpu": "from a storm", "worker_starts": "w"}
    import tomllib

    path = tmp_path / "p.toml"
    write_profile(path, {"claim_s": 0.001}, {"scan": 'a "quoted" note, 1 µs'})
    assert tomllib.loads(path.read_text())["measured"]["scan"] == 'a "quoted" note, 1 µs'
