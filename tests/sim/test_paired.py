"""Runs with and without a fault are paired: the same seed gives every run the same
task duration and outcome in both (its own draws, sim.draws), so the two differ only
where the fault reached, and a fault's victims come from its own generator."""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.model import Model
from sim.scenario import load_profile, load_scenario

# a steady load with 2% poison jobs; the worker crash (faults.1) at 40.5 s, or never
BASE = ("duration_s=90", "drain_s=300")
CRASH_AT_S = 40.5
NEVER = 100_000.0


def scenario(crash_at_s: float) -> dict[str, Any]:
    s = load_scenario("worker-loss-with-poison", list(BASE))
    s["faults"][1]["at_s"] = crash_at_s  # between two seconds: no tie with a scan or tick
    return s


def traced(crash_at_s: float) -> tuple[Model, dict[tuple[int, int], dict[str, Any]]]:
    """Run the model and note each attempt's fire time, starts and finishes."""
    s = scenario(crash_at_s)
    m = Model(s, load_profile(None, s["profile"]), 7)
    seen: dict[tuple[int, int], dict[str, Any]] = {}
    record_start, record_finish = m.record_start, m.record_finish

    def on_start(
        run: np.ndarray, att: np.ndarray, vis: np.ndarray, take: np.ndarray, start: np.ndarray
    ) -> None:
        fire = m.runs.fire[run - m.runs.origin]
        for r, a, f, st in zip(
            run.tolist(), att.tolist(), fire.tolist(), start.tolist(), strict=True
        ):
            e = seen.setdefault((r, a), {"fire": f, "start": [], "end": []})
            e["start"].append(st)
        record_start(run, att, vis, take, start)

    def on_finish(fin: dict[str, np.ndarray]) -> None:
        for r, a, end, ok in zip(
            fin["run"].tolist(),
            fin["attempt"].tolist(),
            fin["end"].tolist(),
            fin["ok"].tolist(),
            strict=True,
        ):
            seen[(r, a)]["end"].append((end, ok))
        record_finish(fin)

    m.record_start = on_start  # type: ignore[method-assign]
    m.record_finish = on_finish  # type: ignore[method-assign]
    m.run()
    return m, seen


def test_runs_with_and_without_a_fault_differ_only_where_the_fault_reached():
    calm, a = traced(NEVER)
    hit, b = traced(CRASH_AT_S)
    at_ms = CRASH_AT_S * 1000
    assert calm.counters["leases_expired"] == 0
    assert hit.counters["leases_expired"] > 0  # the crash happened and was recovered
    assert calm.stats.counts["generated"] == hit.stats.counts["generated"]

    # before the fault: every run scheduled before it has the same attempts, starts and
    # finishes, but for those with an attempt in flight at the crash (all it can reach)
    by_run: dict[int, list[tuple[int, int]]] = {}
    for k in a.keys() | b.keys():
        by_run.setdefault(k[0], []).append(k)
    before = {r for r, ks in by_run.items() if (a.get(ks[0]) or b[ks[0]])["fire"] < at_ms}
    assert len(before) > 50_000
    in_flight = {
        k[0] for k, e in a.items() if e["start"] and e["start"][0] <= at_ms < e["end"][0][0]
    }

    def lives(seen: dict[tuple[int, int], dict[str, Any]], r: int) -> list[Any]:
        return [(k[1], seen[k]["start"], seen[k]["end"]) for k in sorted(by_run[r]) if k in seen]

    differ = {r for r in before if lives(a, r) != lives(b, r)}
    assert differ  # the crash reached some
    assert differ <= in_flight

    # after it too: an attempt executed once in both took as long and ended the same way
    # in both (its own draws, not the n-th number of a shared stream)
    once = [
        k
        for k in a.keys() & b.keys()
        if len(a[k]["start"]) == len(b[k]["start"]) == len(a[k]["end"]) == len(b[k]["end"]) == 1
    ]
    after = [k for k in once if a[k]["fire"] >= at_ms]
    assert len(after) > 50_000
    for k in once:
        (end_a, ok_a), (end_b, ok_b) = a[k]["end"][0], b[k]["end"][0]
        assert ok_a == ok_b, k
        took_a, took_b = end_a - a[k]["start"][0], end_b - b[k]["start"][0]
        assert abs(took_a - took_b) < 1e-6, k  # equal but for the float sums' rounding
    # and most runs after the fault are untouched by it altogether
    same_after = sum(
        1 for k in after if (a[k]["start"], a[k]["end"]) == (b[k]["start"], b[k]["end"])
    )
    assert same_after > 0.9 * len(after)


def test_a_faults_victims_do_not_depend_on_the_other_faults():
    """The crash's victims are drawn from its own generator: a duplicate-delivery fault
    added before it (drawing its own victims) leaves them as they were."""
    base, more = scenario(CRASH_AT_S), scenario(CRASH_AT_S)
    more["faults"] = [
        more["faults"][0],
        {"kind": "inject_duplicate", "at_s": 20.5, "count": 3},
        more["faults"][1],
    ]
    victims = []
    for s in (base, more):
        m = Model(s, load_profile(None, s["profile"]), 7)
        crashed: list[np.ndarray] = []
        real = m.pool.crash_workers

        def spy(
            t_ms: float, ids: np.ndarray, restart_ms: float, real: Any = real, seen: Any = crashed
        ) -> Any:
            seen.append(ids.copy())
            return real(t_ms, ids, restart_ms)

        m.pool.crash_workers = spy  # type: ignore[method-assign]
        m.run()
        victims.append(np.concatenate(crashed))
    assert victims[0].size == 100
    assert np.array_equal(victims[0], victims[1])
