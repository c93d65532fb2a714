"""`cronfleet calibrate`'s scan measurement on the real PostgreSQL, at a small size: every
job class goes through the kit's own scan (kit.scheduler.scan.scan_partitions), each scan
fires exactly its batch, and the triggers it leaves are the cron and interval jobs' next
ones, none of a one-off's (the measurement checks that itself and refuses otherwise).
Nothing here is timed: the slopes are unit-tested (tests/unit/test_calibrate_scan_fit.py)."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pytest

import sim.calibrate as calibrate
from kit.core.schedule import OneOffSchedule


@pytest.fixture
def small_scan(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """measure_scan at two small sizes, in its own scratch database, the claims and the
    statement not measured; what the scans gave is captured instead of fitted."""
    monkeypatch.setattr(calibrate, "SCAN_SIZES", (30, 60))
    monkeypatch.setattr(calibrate, "DB_NAME", f"cronfleet_calibrate_test_{os.getpid()}")
    got: dict[str, Any] = {}

    def claims(engine: Any, run_ids: Any, rng: Any) -> dict[str, Any]:
        got["run_ids"] = list(run_ids)
        return {}

    def numbers(samples: Any, empty: Any, claims: Any, statement: Any) -> Any:
        got["samples"] = samples
        return {}, {}

    monkeypatch.setattr(calibrate, "measure_claims", claims)
    monkeypatch.setattr(calibrate, "measure_statement", lambda engine: 0.001)
    monkeypatch.setattr(calibrate, "_scan_numbers", numbers)
    return got


def test_every_class_is_scanned_by_the_kits_scan_and_one_offs_leave_no_trigger(
    admin_engine, small_scan
):
    calibrate.measure_scan(admin_engine.url.render_as_string(hide_password=False))
    samples = small_scan["samples"]
    assert sorted({s.job_class for s in samples}) == sorted(calibrate.JOB_CLASSES)
    assert len(samples) == len(calibrate.JOB_CLASSES) * 2 * 2  # two sizes, twice each
    assert all(s.held == s.fires and s.fires in (30, 60) for s in samples)
    assert len(set(small_scan["run_ids"])) == sum(s.fires for s in samples)


def test_a_one_off_whose_time_is_not_its_triggers_is_refused(admin_engine, small_scan, monkeypatch):
    """A one-off job written with a later `at` than its trigger's fire gets a next trigger:
    the measurement would time a one-off scan that inserts triggers, and refuses."""
    real = calibrate.class_schedule

    def later(job_class: str, variant: int, fire: dt.datetime) -> Any:
        if job_class == "one_off":
            return OneOffSchedule(fire + dt.timedelta(days=1))
        return real(job_class, variant, fire)

    monkeypatch.setattr(calibrate, "class_schedule", later)
    with pytest.raises(RuntimeError, match="triggers left"):
        calibrate.measure_scan(admin_engine.url.render_as_string(hide_password=False))
