"""The drills' auditor (chaos.audit) on hand-made histories: each verdict it must give,
and the ones it must not (a legitimate misfire skip, a duplicate delivery)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from chaos.audit import audit
from chaos.ledger import LedgerLine
from chaos.records import FaultWindow, History, JobFacts, Params, RunFacts, Start, Write
from kit.core.ids import run_id
from kit.core.timeutil import to_epoch_ms

BASE = datetime(2026, 12, 1, 0, 0, 0, tzinfo=UTC)
PARAMS = Params(misfire_grace_ms=5000, scan_ahead_ms=2000)


def oneoff(at: datetime, mode: str = "key") -> tuple[JobFacts, str]:
    job_id = str(uuid.uuid4())
    job = JobFacts(
        job_id, f"job-{job_id[:4]}", mode, "oneoff", {"at": at.isoformat()}, "run_once", 3,
        to_epoch_ms(at - timedelta(seconds=30)),
    )  # fmt: skip
    return job, run_id(job_id, at)


def line(event: str, key: str, at_ms: int, attempt: int = 1) -> LedgerLine:
    return LedgerLine(event, key, attempt, at_ms, 1)


def history(jobs, runs=(), starts=(), effects=(), writes=(), faults=()) -> History:  # type: ignore[no-untyped-def]
    at = to_epoch_ms(BASE)
    return History(
        jobs=tuple(jobs), runs=tuple(runs), starts=(), executions=tuple(starts),
        effects=tuple(effects), writes=tuple(writes), faults=tuple(faults),
        cycles=((at - 60_000, at + 60_000),), end_ms=at + 120_000, params=PARAMS,
    )  # fmt: skip


def test_a_fire_that_took_effect_once_passes_with_its_lag() -> None:
    job, rid = oneoff(BASE)
    at = to_epoch_ms(BASE)
    run = RunFacts(rid, job.job_id, at, "succeeded", 1)
    starts, effects = [line("start", rid, at + 300)], [line("effect", rid, at + 400)]
    result = audit(history([job], [run], starts, effects))
    assert result.passed
    assert (result.expected, result.effects, len(result.lost)) == (1, 1, 0)
    assert result.lags == [(at, 300)]


def test_a_success_without_its_effect_is_lost() -> None:
    job, rid = oneoff(BASE)
    run = RunFacts(rid, job.job_id, to_epoch_ms(BASE), "succeeded", 1)
    result = audit(history([job], [run]))
    assert not result.passed
    assert [f.why for f in result.lost] == ["marked succeeded (attempt 1) but no effect was made"]


def test_a_fire_with_no_run_is_lost() -> None:
    job, _ = oneoff(BASE)
    result = audit(history([job]))
    assert [f.why for f in result.lost] == ["never fired: no run"]


def test_two_effects_of_one_key_honouring_run_are_a_duplicate_effect() -> None:
    job, rid = oneoff(BASE)
    at = to_epoch_ms(BASE)
    run = RunFacts(rid, job.job_id, at, "succeeded", 2)
    starts = [line("start", rid, at + 100), line("start", rid, at + 5000, attempt=2)]
    effects = [line("effect", rid, at + 200), line("effect", rid, at + 5100, attempt=2)]
    result = audit(history([job], [run], starts, effects))
    assert not result.passed
    assert len(result.duplicate_effects) == 1
    assert result.duplicate_executions == 1


def test_a_naive_task_doubling_its_effect_is_counted_not_failed() -> None:
    job, rid = oneoff(BASE, mode="naive")
    at = to_epoch_ms(BASE)
    run = RunFacts(rid, job.job_id, at, "succeeded", 2)
    effects = [line("effect", rid, at + 200), line("effect", rid, at + 5100, attempt=2)]
    result = audit(history([job], [run], effects=effects))
    assert result.passed
    assert result.naive_duplicate_effects == 1


def test_an_effect_nobody_scheduled_is_unexpected() -> None:
    job, rid = oneoff(BASE)
    at = to_epoch_ms(BASE)
    run = RunFacts(rid, job.job_id, at, "succeeded", 1)
    stray = str(uuid.uuid4())
    effects = [line("effect", rid, at), line("effect", stray, at)]
    result = audit(history([job], [run], effects=effects))
    assert [f.run_id for f in result.unexpected_effects] == [stray]
    assert not result.passed


def _fire(writer: str, owner: str, expires_in_ms: int) -> Write:
    at = to_epoch_ms(BASE)
    return Write(1, at, at, writer, "fire", partition_id=3, lease_owner=owner, lease_epoch=7,
                 lease_expires_ms=at + expires_in_ms)  # fmt: skip


def test_a_fire_on_another_nodes_lease_or_an_expired_one_is_a_stale_write() -> None:
    job, rid = oneoff(BASE)
    at = to_epoch_ms(BASE)
    ok = [line("effect", rid, at)]
    run = RunFacts(rid, job.job_id, at, "succeeded", 1)
    fine = audit(history([job], [run], effects=ok, writes=[_fire("scheduler:a", "a", 1000)]))
    assert fine.passed and fine.writes_checked == {"fire": 1}
    other = audit(history([job], [run], effects=ok, writes=[_fire("scheduler:b", "a", 1000)]))
    assert not other.passed and "whose lease is a's" in other.stale_writes[0]
    expired = audit(history([job], [run], effects=ok, writes=[_fire("scheduler:a", "a", -5)]))
    assert not expired.passed and "had expired 5 ms before" in expired.stale_writes[0]


def test_a_reaper_taking_an_unexpired_lease_is_a_stale_write() -> None:
    job, rid = oneoff(BASE)
    at = to_epoch_ms(BASE)
    run = RunFacts(rid, job.job_id, at, "succeeded", 2)
    early = Write(1, at, at, "reaper:reaper", "reap", run_id=rid, old_status="running",
                  old_worker="w1", old_lease_expires_ms=at + 3000)  # fmt: skip
    late = Write(2, at, at, "reaper:reaper", "reap", run_id=rid, old_status="running",
                 old_worker="w1", old_lease_expires_ms=at - 1)  # fmt: skip
    effects = [line("effect", rid, at)]
    assert audit(history([job], [run], effects=effects, writes=[late])).passed
    result = audit(history([job], [run], effects=effects, writes=[early]))
    assert result.stale_writes == [
        f"reaper:reaper took run {rid} from w1 3000 ms before its lease expired"
    ]


def test_a_worker_finishing_a_run_it_no_longer_holds_is_a_stale_write() -> None:
    job, rid = oneoff(BASE)
    at = to_epoch_ms(BASE)
    run = RunFacts(rid, job.job_id, at, "succeeded", 2)
    write = Write(1, at, at, "worker:w1", "finish", run_id=rid, old_status="running",
                  new_status="succeeded", old_worker="w2")  # fmt: skip
    result = audit(history([job], [run], effects=[line("effect", rid, at)], writes=[write]))
    assert result.stale_writes == [f"worker:w1 finished run {rid} held by w2"]


def test_a_misfire_skip_is_lost_unless_an_outage_stopped_every_scan() -> None:
    job_id = str(uuid.uuid4())
    created = BASE - timedelta(seconds=30)
    paused = to_epoch_ms(created + timedelta(seconds=15))
    job = JobFacts(
        job_id, "every-10s", "key", "interval", {"every_s": 10}, "skip", 3,
        to_epoch_ms(created), paused_ms=paused,
    )  # fmt: skip
    fire_at = created + timedelta(seconds=10)
    rid = run_id(job_id, fire_at)
    at = to_epoch_ms(fire_at)
    run = RunFacts(rid, job_id, at, "skipped", 1, skip_reason="misfire")
    without = audit(history([job], [run]))
    assert any("skipped (misfire) with no outage" in f.why for f in without.lost)
    outage = FaultWindow("postgres_crash", "postgres", 0, at - 1000, at + 20_000)
    with_outage = audit(history([job], [run], faults=[outage]))
    assert rid not in {f.run_id for f in with_outage.lost}
    assert with_outage.misfire_skips_justified >= 1


def test_a_retry_cancelled_because_its_job_was_paused_is_not_lost() -> None:
    job, rid = oneoff(BASE, mode="fail")
    at = to_epoch_ms(BASE)
    error = "retry not run: job paused"
    run = RunFacts(rid, job.job_id, at, "cancelled", 2, error=error)
    unpaused = audit(history([job], [run]))
    assert [f.why for f in unpaused.lost] == ["ended cancelled, not dead-lettered"]
    paused = JobFacts(**{**job.__dict__, "paused_ms": at + 5000})
    result = audit(history([paused], [run]))
    assert result.passed and result.retries_dropped_by_pause == 1


def test_a_run_still_waiting_when_a_fault_struck_counts_as_during_it() -> None:
    job, rid = oneoff(BASE)
    at = to_epoch_ms(BASE)
    run = RunFacts(rid, job.job_id, at, "succeeded", 1)
    fault = FaultWindow("worker_kill", "w1", 0, at + 1000, at + 3000)  # struck 1 s after due
    starts, effects = [line("start", rid, at + 6000)], [line("effect", rid, at + 6100)]
    result = audit(history([job], [run], starts, effects, faults=[fault]))
    assert result.lag_during.count == 1 and result.lag_before.count == 0
    assert result.faults[0].late_runs == 1
    assert result.faults[0].recover_s == 3.0  # the late start 3 s after the heal


def test_late_starts_are_counted_by_the_worker_that_first_started_them() -> None:
    """A backlog pinned to one worker (it keeps its partitions through a crash loop)
    shows as that worker's late starts."""
    ran = []
    for i, (worker, late_ms) in enumerate([("w1", 100), ("w2", 9000), ("w2", 2500), ("w3", 0)]):
        at = BASE + timedelta(seconds=i)
        job, rid = oneoff(at)
        ran.append((job, rid, to_epoch_ms(at), worker, late_ms))
    jobs = [job for job, *_ in ran]
    tiers = ["normal", "low", "critical", "low"]
    runs = [
        RunFacts(rid, job.job_id, at, "succeeded", 1, priority=tier)
        for (job, rid, at, _, _), tier in zip(ran, tiers, strict=True)
    ]
    starts = [line("start", rid, at + late) for _, rid, at, _, late in ran]
    effects = [line("effect", rid, at + late + 50) for _, rid, at, _, late in ran]
    h = history(jobs, runs, starts, effects)
    journal = [Start(rid, 1, at + late, w) for _, rid, at, w, late in ran]
    # a second start of the late one on another worker does not move it
    journal.append(Start(ran[1][1], 2, ran[1][2] + 20_000, "w1"))
    result = audit(replace(h, starts=tuple(journal)))
    assert result.starts_by_worker == {"w1": 1, "w2": 2, "w3": 1}
    assert result.late_by_worker == {"w1": 0, "w2": 2, "w3": 0}
    # by lane: w2's two late ones came by two tiers; w3's low lane was on time
    assert result.late_by_lane == {
        "w1 normal": [0, 1],
        "w2 critical": [1, 1],
        "w2 low": [1, 1],
        "w3 low": [0, 1],
    }


def test_a_run_left_pending_is_lost_and_the_finding_tells_its_trail() -> None:
    """CI shows only the finding: it must say where the run got stuck."""
    job, rid = oneoff(BASE)
    at = to_epoch_ms(BASE)
    run = RunFacts(rid, job.job_id, at, "pending", 1, created_ms=at - 5000, dispatched_ms=at + 900)
    claim = Write(1, at - 4000, at - 4000, "worker:w2", "claim", run_id=rid,
                  old_status="pending", new_status="running", new_attempt=1)  # fmt: skip
    back = Write(2, at + 800, at + 800, "worker:w2", "holder_write", run_id=rid,
                 old_status="running", new_status="pending", new_attempt=1)  # fmt: skip
    a = audit(history([job], [run], writes=[claim, back]))
    assert [f.run_id for f in a.lost] == [rid]
    why = a.lost[0].why
    assert why.startswith("still pending (attempt 1) when the fleet was quiet")
    assert "committed -5.0 s, last published +0.9 s" in why
    assert "claim pending->running a1 by worker:w2 -4.0 s" in why
    assert "holder_write running->pending a1 by worker:w2 +0.8 s" in why


def test_the_main_threads_frames_are_read_from_a_stack_dump(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import faulthandler
    import threading

    from chaos.runner import main_thread_frames

    release = threading.Event()
    other = threading.Thread(target=release.wait, name="other")
    other.start()
    try:
        with (tmp_path / "dump").open("w+") as f:
            faulthandler.dump_traceback(f, all_threads=True)
            f.seek(0)
            frames = main_thread_frames(f.read())
    finally:
        release.set()
        other.join()
    assert frames and "test_the_main_threads_frames_are_read" in frames[0]
    assert not any("threading.py" in fr and "wait" in fr for fr in frames)  # not the other's
    assert main_thread_frames("no dump here") == []
