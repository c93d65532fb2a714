"""The worker's fence pass (kit.worker.worker.Worker._fence_pass) on runs it holds, with no
database: what it stops, and what it must not."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine

from kit.store.claims import ClaimedRun
from kit.worker.worker import Worker, _InFlight


def worker() -> Worker:
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")  # never connected
    return Worker(engine, None, None, "w", concurrency=4, lease_ttl_ms=30_000)  # type: ignore[arg-type]


def held(w: Worker, **kw: Any) -> _InFlight:
    now = datetime.now(UTC)
    run = ClaimedRun("r1", "j1", "acme", 1, "tok", "normal", now, now, {"type": "http"}, 60)
    entry = _InFlight(run, confirmed_until=time.monotonic() + 30, **kw)
    w._in_flight[run.run_id] = entry
    return entry


def test_a_run_marked_started_before_its_deadline_is_set_is_not_cancelled() -> None:
    """The fence thread reads `started` and `deadline` without the worker's lock. A run
    seen started before its deadline was written used to be cancelled as "overran its
    timeout" at its first instruction (its deadline was 0.0): found by the sustained http
    benchmark, 7 runs in 180,000 failed 'cancelled' and 2 reached their target twice."""
    w = worker()
    entry = held(w, started=True)  # as the fence may see it, half-way through _began
    w._fence_pass(time.monotonic())
    assert not entry.cancel.is_set()


def test_a_started_run_past_its_deadline_is_cancelled() -> None:
    w = worker()
    entry = held(w, started=True, deadline=time.monotonic() - 1)
    w._fence_pass(time.monotonic())
    assert entry.cancel.is_set() and not entry.fenced


def test_a_run_whose_lease_is_not_confirmed_is_fenced() -> None:
    w = worker()
    entry = held(w, started=True, deadline=time.monotonic() + 60)
    w._fence_pass(entry.confirmed_until)  # within the margin of its lease's end
    assert entry.fenced and entry.cancel.is_set()


def test_a_finished_run_is_beaten_only_when_its_lease_would_end_within_the_horizon() -> None:
    """Its outcome is still to be written under its lease, whatever its timeout; but one
    with most of a ttl left is not renewed (it used to be, at every beat: thousands at a
    storm's second)."""
    w = worker()
    entry = held(w, started=True, done=True, deadline=time.monotonic() - 1)
    now = time.monotonic()
    assert not w._beat_wanted(entry, int(now * 1000))  # 30 s left, horizon 28 s
    soon = entry.confirmed_until - w.beat_horizon_ms / 1000 + 1
    assert w._beat_wanted(entry, int(soon * 1000))  # past its deadline: still beaten


def test_a_running_run_is_not_beaten_past_its_deadline() -> None:
    w = worker()
    entry = held(w, started=True, deadline=time.monotonic() - 1)
    soon = entry.confirmed_until - w.beat_horizon_ms / 1000 + 1
    assert not w._beat_wanted(entry, int(soon * 1000))
    entry.deadline = soon + 60
    assert w._beat_wanted(entry, int(soon * 1000))


def test_the_finisher_leaves_start_lags_to_observe_until_the_starts_end() -> None:
    """Observing 25,000 lags into the histogram holds the interpreter lock ~40 ms; in the
    middle of a storm's second that was the hold thread's lock (calibration storm of
    2026-12-03 sitting 5: 23.8 ms of finisher beside worker-2's starts)."""
    w = worker()
    w._lags.extend([("acme", 0.1), ("globex", 0.2)])
    w._finisher_stop.set()  # one turn: nothing to write, stopping
    w._starting.set()
    w._finish_loop()
    assert len(w._lags) == 2
    w._starting.clear()
    w._finish_loop()
    assert not w._lags
    # into the fleet-wide histogram and each tenant's
    count = w.metrics.value
    assert count("cronfleet_worker_start_lag_seconds_count") == 2
    assert count("cronfleet_worker_tenant_start_lag_seconds_count", tenant="globex") == 1


def test_a_beat_due_during_the_starts_waits_for_them() -> None:
    """A beat walks every run in flight under the worker's lock; during a storm's starts
    it waits (at most _FINISH_YIELD_S) like the finisher."""
    import threading

    w = worker()
    w.beat_tick_s = 0.05
    beats: list[float] = []
    w.heartbeat = lambda: beats.append(time.monotonic()) or set()  # type: ignore[method-assign]
    w._starting.set()
    loop = threading.Thread(target=w._heartbeat_loop, daemon=True)
    loop.start()
    time.sleep(0.3)
    cleared = time.monotonic()
    w._starting.clear()
    time.sleep(0.2)
    w._beating.set()
    loop.join(5)
    assert beats and beats[0] >= cleared


def test_a_worker_that_did_not_run_for_a_while_says_so_and_what_it_fences(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stopped past its leases (SIGSTOP, a host pause), the worker wakes to runs another
    worker may hold now: it says so, with how many it fences, and fences them."""
    w = worker()
    lost = held(w, started=True, deadline=time.monotonic() + 60)
    now = lost.confirmed_until + 1  # woke after its lease ran out
    with caplog.at_level("WARNING", logger="kit.worker.worker"):
        w._woke(6.0, now)
        w._fence_pass(now)
    assert "woke after 6.0 s" in caplog.text and "1 of 1 runs" in caplog.text
    assert lost.fenced and lost.cancel.is_set()
    assert w.metrics.value("cronfleet_worker_woke_total") == 1
