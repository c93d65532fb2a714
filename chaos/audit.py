"""The auditor, Jepsen style: from a drill's history (chaos.records.History) alone, what
the schedules owed, what ran, what took effect, and what was written by someone who had
no right to. Pure: no I/O, no clock; every instant comes in the history.

- expected fires: each job's schedule from its creation to its pause (kit.core.owed,
  the same walk the scheduler makes), one-off times, each named by its run id (the
  idempotency key its task receives);
- lost: an expected fire with no effect and no legitimate reason: never fired, marked
  succeeded without its effect, dead-lettered (a healthy job has attempts to spare),
  unfinished when the fleet went quiet, or skipped as misfired when no outage could have
  made it late (a misfire skip is legitimate only for a job whose policy skips, and only
  when the fire turned late while a fault stopped every scheduler; a waiting retry
  cancelled because its job was paused is legitimate too);
- unexpected: an effect, or a run that was not skipped, that no schedule owed;
- duplicate executions and deliveries: counted, allowed (at-least-once);
- duplicate effects: a key-honouring task whose key took effect twice (two executions of
  one run overlapped): must be 0. Tasks that ignore the key are counted apart;
- stale writes accepted: a scheduler node that fired a trigger of a partition whose
  lease it did not hold unexpired; a worker writing a run another worker held (or one no
  longer running); a reaper taking a lease that had not expired: must be 0;
- overlapping executions (an execution acting after a later attempt of its run started)
  and runs started twice in the cycle of a fault the leases outlive (chaos.overlap):
  must be 0;
- start lag before, during and after each fault, and the time from the heal until runs
  start on time again.
"""

from __future__ import annotations

import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from chaos.ledger import POISON_MODES
from chaos.overlap import overlapping_executions, second_starts_in_once_faults
from chaos.records import FaultWindow, History, JobFacts, RunFacts, Start, Write
from kit.core import invariants
from kit.core.ids import run_id as make_run_id
from kit.core.owed import ScheduleEra, owed_fires
from kit.core.schedule import parse_schedule
from kit.core.timeutil import from_epoch_ms, to_epoch_ms

MAX_FIRES_PER_JOB = 100_000
PAUSE_BAND_EXTRA_MS = 1000


@dataclass(frozen=True, slots=True)
class Fire:
    run_id: str
    job_id: str
    at_ms: int
    optional: bool = False  # due so close to the job's pause that it may not have fired


@dataclass(frozen=True)
class Finding:
    run_id: str
    job: str
    at_ms: int
    why: str


@dataclass
class LagStats:
    count: int = 0
    p50_s: float | None = None
    p99_s: float | None = None
    max_s: float | None = None

    @classmethod
    def of(cls, lags_ms: Sequence[int]) -> LagStats:
        if not lags_ms:
            return cls()
        ordered = sorted(lags_ms)
        return cls(
            len(ordered),
            round(_pct(ordered, 50) / 1000, 3),
            round(_pct(ordered, 99) / 1000, 3),
            round(ordered[-1] / 1000, 3),
        )


@dataclass
class FaultOutcome:
    kind: str
    target: str
    cycle: int
    start_ms: int
    heal_ms: int
    late_runs: int  # runs due from the fault on that started later than lag_ok
    recover_s: float  # from the heal until the last late start (0: none late)


@dataclass
class CycleCounts:
    cycle: int
    expected: int = 0
    effects: int = 0
    lost: int = 0
    duplicate_executions: int = 0
    duplicate_effects: int = 0


@dataclass
class Audit:
    expected: int = 0
    expected_poison: int = 0
    optional: int = 0
    runs: int = 0
    effects: int = 0
    lost: list[Finding] = field(default_factory=list)
    unexpected_effects: list[Finding] = field(default_factory=list)
    unexpected_runs: list[Finding] = field(default_factory=list)
    duplicate_effects: list[Finding] = field(default_factory=list)  # key-honouring tasks
    naive_duplicate_effects: int = 0  # tasks that ignore the key: allowed, counted
    executions: int = 0
    duplicate_executions: int = 0  # task starts beyond the first, per run (ledger)
    duplicate_deliveries: int = 0  # starts beyond the first, per run (workers' journal)
    claims: int = 0
    stale_writes: list[str] = field(default_factory=list)
    overlapping: list[Finding] = field(default_factory=list)  # chaos.overlap
    started_twice_once: list[Finding] = field(default_factory=list)  # chaos.overlap
    writes_checked: dict[str, int] = field(default_factory=dict)
    misfire_skips_justified: int = 0
    retries_dropped_by_pause: int = 0  # a waiting retry of a job paused meanwhile
    poison_dead: int = 0
    late_finishes: int = 0  # a holder finished after its lease ran out, nobody else held it
    # per worker (the journal's first start of each run): runs started, and those started
    # later than the target; a backlog pinned to one worker shows here
    starts_by_worker: dict[str, int] = field(default_factory=dict)
    late_by_worker: dict[str, int] = field(default_factory=dict)
    # the same by lane, "worker tier" -> [late, started]: one tier's consumer on one worker
    # (a tier's topic has a partition or two here) stuck behind is told from a slow worker
    late_by_lane: dict[str, list[int]] = field(default_factory=dict)
    lag_before: LagStats = field(default_factory=LagStats)
    lag_during: LagStats = field(default_factory=LagStats)
    lag_after: LagStats = field(default_factory=LagStats)
    lag_all: LagStats = field(default_factory=LagStats)
    faults: list[FaultOutcome] = field(default_factory=list)
    cycles: list[CycleCounts] = field(default_factory=list)
    lags: list[tuple[int, int]] = field(default_factory=list)  # (scheduled_ms, lag_ms)

    @property
    def passed(self) -> bool:
        return not (
            self.lost
            or self.duplicate_effects
            or self.stale_writes
            or self.overlapping
            or self.started_twice_once
            or self.unexpected_effects
            or self.unexpected_runs
        )

    def summary(self) -> dict[str, Any]:
        recover = [f.recover_s for f in self.faults]
        return {
            "passed": self.passed,
            "expected": self.expected,
            "expected_poison": self.expected_poison,
            "effects": self.effects,
            "lost": len(self.lost),
            "unexpected_effects": len(self.unexpected_effects),
            "unexpected_runs": len(self.unexpected_runs),
            "duplicate_effects": len(self.duplicate_effects),
            "naive_duplicate_effects": self.naive_duplicate_effects,
            "duplicate_executions": self.duplicate_executions,
            "duplicate_deliveries": self.duplicate_deliveries,
            "stale_writes_accepted": len(self.stale_writes),
            "overlapping_executions": len(self.overlapping),
            "started_twice_in_short_stalls": len(self.started_twice_once),
            "writes_checked": dict(self.writes_checked),
            "misfire_skips_justified": self.misfire_skips_justified,
            "retries_dropped_by_pause": self.retries_dropped_by_pause,
            "poison_dead_lettered": self.poison_dead,
            "late_finishes": self.late_finishes,
            "starts_by_worker": self.starts_by_worker,
            "late_by_worker": self.late_by_worker,
            "late_by_lane": self.late_by_lane,
            "faults": len(self.faults),
            "recover_s_median": _median(recover),
            "recover_s_max": max(recover) if recover else None,
            "lag_before": asdict(self.lag_before),
            "lag_during": asdict(self.lag_during),
            "lag_after": asdict(self.lag_after),
            "lag_all": asdict(self.lag_all),
        }

    def to_json(self) -> dict[str, Any]:
        out = self.summary()
        out["findings"] = {
            "lost": [asdict(f) for f in self.lost],
            "unexpected_effects": [asdict(f) for f in self.unexpected_effects],
            "unexpected_runs": [asdict(f) for f in self.unexpected_runs],
            "duplicate_effects": [asdict(f) for f in self.duplicate_effects],
            "stale_writes": list(self.stale_writes),
            "overlapping_executions": [asdict(f) for f in self.overlapping],
            "started_twice_in_short_stalls": [asdict(f) for f in self.started_twice_once],
        }
        out["faults_detail"] = [asdict(f) for f in self.faults]
        out["cycles"] = [asdict(c) for c in self.cycles]
        return out


# -- expected fires ---------------------------------------------------------------------


def expected_fires(job: JobFacts, end_ms: int, scan_ahead_ms: int) -> list[Fire]:
    """The fires `job` owed: its one-off time, or its schedule's fires after its creation
    and before its pause (or `end_ms`). Fires due within a scan-ahead after the pause may
    have been written before it (they run, and must take effect) or not (skipped
    'paused'): optional."""
    created = from_epoch_ms(job.created_ms)
    schedule = parse_schedule(job.schedule, now=created)
    if job.kind == "oneoff":
        at = schedule.at  # type: ignore[union-attr]
        return [Fire(sys.intern(make_run_id(job.job_id, at)), job.job_id, _ms(at))]
    stop_ms = job.paused_ms if job.paused_ms is not None else end_ms
    band_to = stop_ms + scan_ahead_ms + PAUSE_BAND_EXTRA_MS
    owed = owed_fires(
        job.job_id,
        [ScheduleEra(schedule, since=created)],
        created,
        from_epoch_ms(min(band_to, end_ms)),
        MAX_FIRES_PER_JOB,
    )
    return [
        Fire(sys.intern(f.run_id), job.job_id, _ms(f.at), optional=_ms(f.at) >= stop_ms)
        for f in owed
    ]  # run ids shared with the records read (chaos.history)


# -- the verdicts -----------------------------------------------------------------------


def misfire_justified(
    fire_ms: int, job: JobFacts, faults: Iterable[FaultWindow], grace_ms: int, slack_ms: int
) -> bool:
    """A late fire skipped by the misfire policy is legitimate when the job's policy
    skips and the fire turned late (fire + grace) while a fault stopped every scan."""
    if job.misfire == "run_all":
        return False
    late_at = fire_ms + grace_ms
    return any(f.stops_scans and f.start_ms <= late_at <= f.heal_ms + slack_ms for f in faults)


def stale_write(write: Write) -> str | None:
    """Why this recorded write should not have been accepted, or None."""
    role, _, name = write.writer.partition(":")
    if write.kind == "fire":
        if write.lease_owner != name:
            return (
                f"{write.writer} fired a trigger of partition {write.partition_id} whose lease "
                f"is {write.lease_owner or 'nobody'}'s (epoch {write.lease_epoch})"
            )
        if write.lease_expires_ms is not None and write.lease_expires_ms <= write.tx_now_ms:
            return (
                f"{write.writer} fired a trigger of partition {write.partition_id} on a lease "
                f"that had expired {write.tx_now_ms - write.lease_expires_ms} ms before"
            )
        return None
    if write.kind == "holder_write":
        return f"{write.writer} wrote run {write.run_id} held by {write.old_worker}"
    if write.kind == "finish":
        if write.old_status != "running":
            return (
                f"{write.writer} finished run {write.run_id} that was {write.old_status} "
                f"(attempt {write.old_attempt})"
            )
        if write.old_worker != name:
            return f"{write.writer} finished run {write.run_id} held by {write.old_worker}"
        return None
    if write.kind == "reap" and role == "reaper":
        expires = write.old_lease_expires_ms
        if expires is not None and expires > write.tx_now_ms:
            return (
                f"{write.writer} took run {write.run_id} from {write.old_worker} "
                f"{expires - write.tx_now_ms} ms before its lease expired"
            )
    return None


def audit(history: History) -> Audit:
    p = history.params
    result = Audit()
    jobs = {j.job_id: j for j in history.jobs}
    runs = {r.run_id: r for r in history.runs}
    effects: dict[str, int] = Counter(line.key for line in history.effects)
    result.effects = sum(effects.values())
    result.runs = len(runs)

    starts_by_key: dict[str, list[int]] = defaultdict(list)
    for line in history.executions:
        if line.event == "start":
            starts_by_key[line.key].append(line.at_ms)
    result.executions = sum(len(v) for v in starts_by_key.values())
    result.duplicate_executions = sum(len(v) - 1 for v in starts_by_key.values())
    journal = Counter(s.run_id for s in history.starts)
    result.duplicate_deliveries = sum(n - 1 for n in journal.values())

    fires: dict[str, Fire] = {}
    for job in history.jobs:
        for fire in expected_fires(job, history.end_ms, p.scan_ahead_ms):
            fires[fire.run_id] = fire

    cycles = [CycleCounts(i) for i in range(len(history.cycles))]

    def cycle_of(at_ms: int) -> CycleCounts | None:
        for (start, end), counts in zip(history.cycles, cycles, strict=True):
            if start <= at_ms < end:
                return counts
        return None

    lags: list[tuple[int, int]] = []
    for fire in fires.values():
        job = jobs[fire.job_id]
        run = runs.get(fire.run_id)
        n_effects = effects.get(fire.run_id, 0)
        counts = cycle_of(fire.at_ms)
        if fire.optional:
            result.optional += 1
            if run is None or run.status == "skipped" or job.mode in POISON_MODES:
                continue
        if job.mode in POISON_MODES:
            result.expected_poison += 1
            _judge_poison(result, job, fire, run, n_effects, history)
            continue
        result.expected += 1
        if counts:
            counts.expected += 1
            counts.effects += min(n_effects, 1)
            counts.duplicate_executions += max(0, len(starts_by_key.get(fire.run_id, ())) - 1)
        if n_effects > 1:
            if job.mode == "key":
                result.duplicate_effects.append(
                    Finding(fire.run_id, job.name, fire.at_ms, f"{n_effects} effects")
                )
                if counts:
                    counts.duplicate_effects += 1
            else:
                result.naive_duplicate_effects += n_effects - 1
        first_start = min(starts_by_key[fire.run_id]) if starts_by_key.get(fire.run_id) else None
        if first_start is not None:
            lags.append((fire.at_ms, max(0, first_start - fire.at_ms)))
        if n_effects:
            continue
        why = _why_lost(fire, job, run, history)
        if why is None:
            _count_justified(result, run)
            continue
        result.lost.append(Finding(fire.run_id, job.name, fire.at_ms, why))
        if counts:
            counts.lost += 1

    for key, n in effects.items():
        if key not in fires:
            result.unexpected_effects.append(Finding(key, "?", 0, f"{n} effects, no fire owed"))
    for run in runs.values():
        if run.run_id not in fires and run.status != "skipped":
            job = jobs.get(run.job_id)
            result.unexpected_runs.append(
                Finding(
                    run.run_id,
                    job.name if job else run.job_id,
                    run.scheduled_ms,
                    f"{run.status} run (attempt {run.attempt}) that no schedule owed",
                )
            )

    _judge_writes(result, history.writes)
    _judge_executions(result, history, fires, jobs)
    result.lags = sorted(lags)
    _lags_by_phase(result, history)
    _late_by_worker(result, history, fires)
    result.cycles = cycles
    return result


def _judge_executions(
    result: Audit, history: History, fires: dict[str, Fire], jobs: dict[str, JobFacts]
) -> None:
    def finding(f: Any) -> Finding:
        fire = fires.get(f.run_id)
        job = jobs.get(fire.job_id) if fire else None
        return Finding(f.run_id, job.name if job else "?", fire.at_ms if fire else 0, f.why)

    healthy = {
        run_id for run_id, fire in fires.items() if jobs[fire.job_id].mode not in POISON_MODES
    }
    result.overlapping = [
        finding(f) for f in overlapping_executions(history.executions, history.effects, healthy)
    ]
    result.started_twice_once = [
        finding(f)
        for f in second_starts_in_once_faults(
            (s for s in history.starts if s.run_id in healthy), history.faults, history.cycles
        )
    ]


def _late_by_worker(result: Audit, history: History, fires: dict[str, Fire]) -> None:
    """Which worker first started each owed run, and which of them started it late: a
    worker that keeps its partitions through a crash loop keeps their backlog too."""
    first: dict[str, Start] = {}
    for s in history.starts:
        if s.run_id in fires and (s.run_id not in first or s.at_ms < first[s.run_id].at_ms):
            first[s.run_id] = s
    tier = {r.run_id: r.priority or "?" for r in history.runs}
    starts: Counter[tuple[str, str]] = Counter()  # by lane: (worker, tier)
    late: Counter[tuple[str, str]] = Counter()
    for run_id, s in first.items():
        lane = (s.worker, tier.get(run_id, "?"))
        starts[lane] += 1
        late[lane] += s.at_ms - fires[run_id].at_ms > history.params.lag_ok_ms
    workers = sorted({w for w, _ in starts})
    result.starts_by_worker = {w: sum(n for (v, _), n in starts.items() if v == w) for w in workers}
    result.late_by_worker = {w: sum(n for (v, _), n in late.items() if v == w) for w in workers}
    result.late_by_lane = {f"{w} {t}": [late[w, t], starts[w, t]] for w, t in sorted(starts)}


def _judge_poison(
    result: Audit,
    job: JobFacts,
    fire: Fire,
    run: RunFacts | None,
    n_effects: int,
    history: History,
) -> None:
    """A poison fire takes no effect and ends dead-lettered after its attempts."""
    if n_effects:
        result.unexpected_effects.append(
            Finding(fire.run_id, job.name, fire.at_ms, "a poison task took effect")
        )
    if run is not None and run.status == "dead":
        result.poison_dead += 1
        return
    why = _why_lost(fire, job, run, history, poison=True)
    if why is None:
        _count_justified(result, run)
        return
    result.lost.append(Finding(fire.run_id, job.name, fire.at_ms, why))


def _count_justified(result: Audit, run: RunFacts | None) -> None:
    if run is not None and run.status == "cancelled":
        result.retries_dropped_by_pause += 1
    else:
        result.misfire_skips_justified += 1


def _retry_dropped_by_pause(run: RunFacts, job: JobFacts) -> bool:
    """A retry the scheduler cancelled because the job was paused (by the workload at the
    end, or by the kit's dead-streak breaker): the pause's legitimate consequence."""
    return job.paused_ms is not None and (run.error or "").startswith("retry not run")


def _why_lost(
    fire: Fire, job: JobFacts, run: RunFacts | None, history: History, poison: bool = False
) -> str | None:
    """Why a fire has no effect (a poison fire: is not dead-lettered), or None when the
    reason is legitimate (a justified misfire skip)."""
    p = history.params
    if run is None:
        return "never fired: no run"
    if run.status == "skipped":
        if run.skip_reason == "misfire" and misfire_justified(
            fire.at_ms, job, history.faults, p.misfire_grace_ms, p.recover_slack_ms
        ):
            return None
        return f"skipped ({run.skip_reason}) with no outage to justify it"
    if run.status == "cancelled" and _retry_dropped_by_pause(run, job):
        return None
    if run.status == "succeeded":
        return f"marked succeeded (attempt {run.attempt}) but no effect was made"
    if run.status == "dead":
        return f"dead-lettered after attempt {run.attempt}, no effect"
    if run.status in ("pending", "running", "retry_scheduled"):
        busy = f"still {run.status} (attempt {run.attempt}) when the fleet was quiet"
        return f"{busy}; {_trail(run, history)}"
    if poison:
        return f"ended {run.status}, not dead-lettered"
    return f"ended {run.status} (attempt {run.attempt}) without its effect"


def _trail(run: RunFacts, history: History) -> str:
    """What happened to a run that never ended, for whoever reads the failure (often
    only CI's output): when it was committed and last published, and every change the
    witness saw a worker or reaper make to it, relative to its second."""

    def rel(ms: int | None) -> str:
        return "never" if ms is None else f"{(ms - run.scheduled_ms) / 1000:+.1f} s"

    moves = [
        f"{w.kind} {w.old_status}->{w.new_status} a{w.new_attempt} by {w.writer} {rel(w.at_ms)}"
        for w in history.writes
        if w.run_id == run.run_id
    ]
    starts = [f"{s.worker} {rel(s.at_ms)}" for s in history.starts if s.run_id == run.run_id]
    return (
        f"committed {rel(run.created_ms)}, last published {rel(run.dispatched_ms)}, "
        f"writes [{'; '.join(moves) or 'none'}], starts [{'; '.join(starts) or 'none'}]"
    )


def _judge_writes(result: Audit, writes: Sequence[Write]) -> None:
    checked: Counter[str] = Counter()
    for write in writes:
        checked[write.kind] += 1
        if write.kind == "claim":
            result.claims += 1
        why = stale_write(write)
        if why is not None:
            result.stale_writes.append(why)
        elif (
            write.kind == "finish"
            and write.old_lease_expires_ms is not None
            and write.old_lease_expires_ms <= write.tx_now_ms
        ):
            result.late_finishes += 1
    result.writes_checked = dict(checked)
    fires = [
        (w.partition_id, w.lease_epoch, w.lease_owner)
        for w in writes
        if w.kind == "fire" and w.lease_epoch is not None
    ]
    try:
        invariants.check_single_holder(fires)
    except invariants.InvariantViolation as exc:
        result.stale_writes.append(f"lease invariant: {exc}")


def _lags_by_phase(result: Audit, history: History) -> None:
    p = history.params
    faults = sorted(history.faults, key=lambda f: f.start_ms)
    before: list[int] = []
    during: list[int] = []
    after: list[int] = []
    first_cycle_ms = history.cycles[0][0] if history.cycles else 0
    for at_ms, lag_ms in result.lags:
        if at_ms < first_cycle_ms:
            continue  # the fleet warming up (consumer groups forming): not a baseline
        phase = _phase(at_ms, faults, p.lag_ok_ms)
        {"before": before, "during": during, "after": after}[phase].append(lag_ms)
    result.lag_before = LagStats.of(before)
    result.lag_during = LagStats.of(during)
    result.lag_after = LagStats.of(after)
    result.lag_all = LagStats.of([lag for _, lag in result.lags])
    for i, fault in enumerate(faults):
        until = faults[i + 1].start_ms if i + 1 < len(faults) else math.inf
        late = [
            (at, lag)
            for at, lag in result.lags
            if fault.start_ms - p.scan_ahead_ms <= at < until and lag > p.lag_ok_ms
        ]
        last_start = max((at + lag for at, lag in late), default=None)
        recover_ms = 0 if last_start is None else max(0, last_start - fault.heal_ms)
        result.faults.append(
            FaultOutcome(
                fault.kind,
                fault.target,
                fault.cycle,
                fault.start_ms,
                fault.heal_ms,
                len(late),
                round(recover_ms / 1000, 3),
            )
        )


def _phase(at_ms: int, faults: Sequence[FaultWindow], after_ms: int) -> str:
    """During a fault (due from `after_ms` before its start, so still waiting when it
    struck, until its heal), just after one (due within `after_ms` plus 10 s of a heal),
    or away from faults."""
    for f in faults:
        if f.start_ms - after_ms <= at_ms < f.heal_ms:
            return "during"
    for f in faults:
        if f.heal_ms <= at_ms < f.heal_ms + after_ms + 10_000:
            return "after"
    return "before"


def _pct(ordered: Sequence[int], q: float) -> float:
    if len(ordered) == 1:
        return float(ordered[0])
    k = (len(ordered) - 1) * q / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    return round(_pct(sorted(values), 50), 3)  # type: ignore[arg-type]


def _ms(instant: datetime) -> int:
    return to_epoch_ms(instant)
