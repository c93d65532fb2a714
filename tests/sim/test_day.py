"""The day: a cron population over IANA zones whose fire times come from kit.core (the
DST shift shows), memory bounded by the runs in flight rather than the period, and
`sim size` looking at the period's busiest windows."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cli import candidate_meets, fewest_nodes, size_windows
from sim.runs import RunTable
from sim.scenario import ScenarioError, load_scenario
from sim.workload import WorkloadStream, due_per_second
from tests.sim.conftest import simulate

SMALL = ("workload.schedules=20000",)


def _hour_of(stream: WorkloadStream, name: str, zone: str) -> list[int]:
    t = next(t for t in stream.templates if t.name == name and t.zone == zone)
    return np.flatnonzero(stream.offered[:, t.index]).tolist()


def _whole_day(*sets: str) -> WorkloadStream:
    s = load_scenario("day", [*SMALL, *sets])
    st = WorkloadStream(s, 1)
    total = 0
    for a in range(0, st.duration_ms, 60_000):
        total += st.generate(a, a + 60_000)["fire"].size
    st.total = total  # type: ignore[attr-defined]
    return st


def test_the_dst_day_moves_the_09_00_pile_an_hour_earlier_in_utc():
    dst = _whole_day()  # Sunday 8 March 2026: New York springs forward at 07:00 UTC
    week_before = _whole_day("start=2026-03-01T00:00:00Z")
    assert _hour_of(dst, "daily-0900", "America/New_York") == [13]
    assert _hour_of(week_before, "daily-0900", "America/New_York") == [14]
    # its midnight came before the change: the same UTC hour both days
    assert _hour_of(dst, "daily-midnight", "America/New_York") == [5]
    assert _hour_of(week_before, "daily-midnight", "America/New_York") == [5]
    # zones without DST that day do not move
    for day in (dst, week_before):
        assert _hour_of(day, "daily-0900", "Europe/London") == [9]
        assert _hour_of(day, "daily-0900", "Asia/Kolkata") == [3]  # 03:30 UTC
    # sub-hourly jobs run every minute of the UTC day, DST or not
    t = next(t for t in dst.templates if t.name == "every-minute" and t.zone == "America/New_York")
    assert dst.offered[:, t.index].tolist() == [t.jobs * 60] * 24


def test_the_population_has_the_requirements_shape():
    st = _whole_day()
    assert st.jobs == pytest.approx(20_000, abs=100)  # rounding per class and zone
    # about 17 runs per schedule per day (170 M for 10 M), weekly jobs only in the zones
    # whose Sunday midnight falls in the UTC day
    assert 16 < st.total / st.jobs < 18
    per_s = due_per_second(WorkloadStream(load_scenario("day", list(SMALL)), 1))
    assert per_s.sum() == pytest.approx(st.total, rel=1e-9)
    # the top of an ordinary hour: 10.22% of the schedules over the 20 s jitter window
    # (~51,000/s at full scale), less Asia/Kolkata's hourly jobs, which fire at :30
    top = 20_000 * (0.1022 - 0.06 * 0.06) / 20
    assert per_s[2 * 3600 : 2 * 3600 + 20].mean() == pytest.approx(top, rel=0.01)
    assert per_s[2 * 3600 + 1800 : 2 * 3600 + 1820].mean() > 0.06 * 0.06 * 20_000 / 20


def test_size_looks_at_the_busiest_windows_of_the_day_first():
    s = load_scenario("day", list(SMALL))
    wins = size_windows(s, 90, 3)
    assert wins[0]["label"].startswith("Sun 00:00")  # UTC and London midnight, weekly too
    assert wins[0]["due"] > wins[1]["due"] > wins[2]["due"]
    assert any(
        "start=2026-03-08T04:59" in x or "start=2026-03-08T05:00" in x for x in wins[1]["sets"]
    )  # New York's midnight
    # and the busiest top of an hour besides them: the hourly jobs' peak has its own shape
    assert len(wins) == 4 and wins[3]["label"].endswith(":59:50 UTC (top of hour)")
    top = size_windows(load_scenario("top-of-hour", []), 90, 3)
    assert len(top) == 1 and "peak_at_s=20" in top[0]["sets"]


def test_a_missing_p99_is_a_miss_not_zero():
    r = {"start_lag_s": {"p99": None}, "audit": {"dropped": 0}, "in_flight_at_end": 0}
    assert not candidate_meets(r, 2.0)
    r["start_lag_s"]["p99"] = 1.5
    assert candidate_meets(r, 2.0)
    assert not candidate_meets({**r, "in_flight_at_end": 3}, 2.0)
    assert not candidate_meets({**r, "audit": {"dropped": 1}}, 2.0)


def test_a_window_of_the_dst_day_through_the_model():
    _, a = simulate("day", *SMALL, "start=2026-03-08T12:59:00Z", "duration_s=180", seed=5)
    _, b = simulate("day", *SMALL, "start=2026-03-08T12:59:00Z", "duration_s=180", seed=5)
    assert a["audit"]["dropped"] == 0 and a["audit"]["duplicated"] == 0
    assert a["in_flight_at_end"] == 0
    assert a["peak_window"]["from"] == "2026-03-08T13:00Z"  # New York's 09:00, after DST
    assert a["model"]["lead_in_runs"] > 0  # the fleet was warm when the window began
    strip = lambda r: {k: v for k, v in r.items() if k not in ("model",)}  # noqa: E731
    assert strip(a) == strip(b)


def test_memory_follows_the_runs_in_flight_not_the_period():
    """Twice the simulated time, the same runs held at once: the runs table holds the
    minutes around the present, not the period."""
    sets = ("workload.runs_per_s=300.0", "workload.peak_runs_per_s=300.0")
    short, r1 = simulate("steady", *sets, "duration_s=900")
    long, r2 = simulate("steady", *sets, "duration_s=1800")
    assert r2["model"]["runs"] > 1.9 * r1["model"]["runs"]
    assert long.runs.peak_live <= 1.2 * short.runs.peak_live
    assert long.runs.peak_live < 300 * 60 * 5  # about three minutes of runs, not 30
    assert long.runs.capacity == short.runs.capacity
    assert r2["audit"]["dropped"] == 0 and r2["in_flight_at_end"] == 0


def test_the_runs_table_keeps_ids_across_compaction():
    t = RunTable(capacity=16)
    for k in range(50):  # 50 windows of 7 runs, retiring all but the last window
        n = 7
        fire = np.arange(n, dtype=np.int64) + 100 * k
        t.append(
            {
                "fire": fire,
                "part": np.zeros(n, np.int16),
                "tier": np.zeros(n, np.int8),
                "cls": np.zeros(n, np.int8),
                "job": np.full(n, k, np.int32),
                "kind": np.zeros(n, np.int8),
                "poison": np.zeros(n, bool),
            }
        )
        assert t.fire[t.rows(t.hi - n, t.hi)].tolist() == fire.tolist()
        assert t.first_after(100 * k + 2) == t.hi - n + 3
        t.lo = t.hi - n
    assert t.hi == 350 and t.live == 7
    assert t.capacity == 32  # grew once to hold two windows, then only compacted


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("workload.zones.UTC=0.5", "workload.zones: shares must add up to 1"),
        ("workload.cron.0.cron=61 * * * *", "workload.cron.0.cron"),
        ("workload.cron.0.jitter_s=4000", "workload.cron.0.jitter_s"),
        ("start=yesterday", "start:"),
        ("lead_in_s=-1", "lead_in_s"),
    ],
)
def test_bad_day_overrides_name_the_field(bad, why):
    with pytest.raises(ScenarioError, match=why.split(":")[0]):
        load_scenario("day", [bad])


def test_the_profile_carries_the_bytes_of_a_run_row():
    from sim.scenario import load_profile

    p = load_profile(None, {})
    assert p["run_row_compact_bytes"] < p["run_row_bytes"]  # measured, see [history]


def test_the_lead_in_leaves_the_fleet_warm_not_behind():
    """Runs due in the lead-in are published in the lead-in: the first second of the
    period is not delayed behind them (a producer that started 'free at time 0' once
    pushed the whole lead-in's publishing onto the period's first second)."""
    sets = ("workload.schedules=1000000", "start=2026-03-07T23:59:00Z", "duration_s=30")
    m, _ = simulate("day", *sets, "lead_in_s=120", seed=1, keep_samples=True)
    s = m.stats.sample_arrays()
    first = s["fire"] < 1000
    assert first.sum() > 100
    # ~2 minutes of runs queued behind one producer per node would be ~23 ms here
    assert np.nanmax(s["dispatch_lag"][first]) < 1.0  # ms


def test_size_finds_the_fewest_nodes_between_the_ladders_rungs():
    """Nodes go up a ladder (1, 2, 3, 4, 6, 8, 12, ...) and then halve back between the
    first rung that meets and the one below: 10 is found, not 12; nothing is simulated
    twice; a fleet that meets from the least asked for is that least."""
    for needed in (1, 2, 5, 7, 9, 10, 11, 12, 13, 30):
        asked: list[int] = []

        def meets(n: int, needed: int = needed, asked: list[int] = asked) -> bool:
            asked.append(n)
            return n >= needed

        assert fewest_nodes(meets, 1, 1024) == needed
        assert len(asked) == len(set(asked))
    assert fewest_nodes(lambda n: n >= 40, 1, 1024) is None  # beyond the ladder's top
    assert fewest_nodes(lambda n: n >= 3, 4, 1024) == 4
    assert fewest_nodes(lambda n: n >= 10, 1, 8) is None  # fewer partitions than nodes
