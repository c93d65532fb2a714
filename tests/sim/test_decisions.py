"""The model decides its scans as the kit does: the same workload driven through the
model and through kit.core.trigger.decide_scan, called as kit/scheduler/scan.py calls
it (every second, the scan-ahead horizon, the node's misfire grace, the busy counts of
the jobs that limit overlap), gives every fire the same fate: fired, queued, skipped
as overlapping or as misfired, late or not.

The kit side here is a replay of the kit's scan over one trigger per job, with the
database's part (trigger rows, run rows, busy counts) kept in memory: a fired run is
busy from its scan until its task (a fixed 90 s) ends, starting at its second or, when
late, at once; a queued run starts when its job's run ends; 'replace' ends the busy
runs at the scan. The scenario (tests/sim/scenarios/overlap.toml) leaves seconds of
margin around every such instant, so the model's millisecond latencies cannot tip one.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

import pytest

import kit.core.trigger
from kit.core import defaults, dispatch, jitter, policies, trigger
from kit.core.schedule import next_fire
from kit.core.timeutil import from_epoch_ms, to_epoch_ms
from sim.model import FIRE, QUEUE, SKIP_MISFIRE, SKIP_OVERLAP, Model
from sim.scenario import load_profile, load_scenario
from sim.workload import start_of

SCENARIO = "tests/sim/scenarios/overlap.toml"
NAMES = {FIRE: "fired", QUEUE: "queued", SKIP_MISFIRE: "misfire", SKIP_OVERLAP: "overlap"}
POLICIES = [
    (overlap, misfire)
    for overlap in ("allow", "forbid", "queue", "replace")
    for misfire in ("run_once", "run_all", "skip_late")
]


def model_decisions(*overrides: str) -> dict[tuple[str, int], tuple[str, bool]]:
    """(job id, fire epoch ms) -> (what the model's scan made of it, late or not)."""
    s = load_scenario(SCENARIO, list(overrides))
    m = Model(s, load_profile(None, s["profile"]), 1)
    m.decision_log = []
    m.run()
    assert m.stats.counts["dropped"] == 0
    st = m.stream
    out: dict[tuple[str, int], tuple[str, bool]] = {}
    for now, jobs, fires, outcome in m.decision_log:
        for j, f, o in zip(jobs.tolist(), fires.tolist(), outcome.tolist(), strict=True):
            tpl = next(t for t in reversed(st.templates) if t.key0 <= j)
            key = (f"{tpl.id_prefix}{j - tpl.key0}", f + st.start_ms)
            assert key not in out, f"{key} decided twice"
            out[key] = (NAMES[o], f < now - m.misfire_grace_ms)
    return out


@dataclass
class JobState:
    """What the kit's database holds of one job: its trigger and its busy runs."""

    view: trigger.JobView
    fire_at_ms: int | None
    running_until: list[int] = field(default_factory=list)  # busy runs' end times
    queue: deque[int] = field(default_factory=deque)  # queued runs' fire times

    def advance(self, now_ms: int, task_ms: int) -> None:
        """Runs that ended by now; a queued run starts when its job's run ends (the
        worker that finishes publishes it)."""
        while self.running_until and min(self.running_until) <= now_ms:
            end = min(self.running_until)
            self.running_until.remove(end)
            if self.queue:
                self.queue.popleft()
                self.running_until.append(end + task_ms)

    def busy(self) -> int:
        return len(self.running_until) + len(self.queue)


def kit_decisions(*overrides: str) -> dict[tuple[str, int], tuple[str, bool]]:
    """The same workload through kit.core.trigger.decide_scan, scan by scan, as the kit's
    scheduler calls it (kit.scheduler.scan.scan_partitions)."""
    s = load_scenario(SCENARIO, list(overrides))
    w = s["workload"]
    start_ms = to_epoch_ms(start_of(s))
    end_ms = start_ms + int(s["duration_s"]) * 1000  # the model's workload stops here
    (task,) = w["classes"].values()
    task_ms = int(float(task["mean_s"]) * 1000)
    grace_ms = defaults.misfire_grace_ms(
        int(float(s["leases"]["partition_ttl_s"]) * 1000),
        defaults.NODE_HEARTBEAT_MS,
        defaults.SCAN_PERIOD_MS,
    )
    overlap = policies.OverlapPolicy.parse(w["overlap"])
    misfire = policies.MisfirePolicy(w["misfire"], int(w["misfire_deadline_s"]))
    (outage,) = s["faults"]
    down = (float(outage["at_s"]), float(outage["at_s"]) + float(outage["duration_s"]))
    from sim.workload import WorkloadStream

    jobs: dict[str, JobState] = {}
    for tpl in WorkloadStream(s, 1).templates:
        for i in range(tpl.jobs):
            job_id = f"{tpl.id_prefix}{i}"
            view = trigger.JobView(
                job_id=job_id,
                version=1,
                schedule=tpl.schedule,
                jitter_offset_ms=jitter.jitter_offset_ms(job_id, tpl.jitter_ms),
                overlap=overlap,
                misfire=misfire,
            )
            first = next_fire(tpl.schedule, from_epoch_ms(start_ms - 1))
            assert first is not None
            jobs[job_id] = JobState(view, to_epoch_ms(first) + view.jitter_offset_ms)
    out: dict[tuple[str, int], tuple[str, bool]] = {}
    last_s = int(s["duration_s"]) + int(s["drain_s"])
    for sec in range(last_s):
        if down[0] <= sec < down[1]:
            continue  # the fleet is down: nobody scans
        now = start_ms + sec * 1000
        _, hi = dispatch.scan_window(now)
        for js in jobs.values():
            js.advance(now, task_ms)
        due = [
            trigger.DueTrigger(0, js.fire_at_ms, job_id, 1)
            for job_id, js in jobs.items()
            if js.fire_at_ms is not None and js.fire_at_ms <= hi
        ]
        active = {
            j: js.busy() for j, js in jobs.items() if overlap is not policies.OverlapPolicy.allow
        }
        views = {j: js.view for j, js in jobs.items()}
        for d in trigger.decide_scan(due, views, active, now, hi, misfire_grace_ms=grace_ms):
            if not d.delete:
                continue  # held back (overlap horizon): a later scan judges it
            js = jobs[d.trigger.job_id]
            if d.cancel_active:
                js.running_until.clear()
                js.queue.clear()
            for r in d.runs:
                if r.scheduled_at_ms >= end_ms:
                    continue
                late = r.scheduled_at_ms < now - grace_ms
                if r.fired:
                    js.running_until.append(max(r.scheduled_at_ms, now) + task_ms)
                    fate = "fired"
                elif r.skip_reason == trigger.QUEUED:
                    js.queue.append(r.scheduled_at_ms)
                    fate = "queued"
                else:
                    assert r.skip_reason is not None
                    fate = r.skip_reason
                out[(r.job_id, r.scheduled_at_ms)] = (fate, late)
            nxt = d.next_fire_at_ms
            js.fire_at_ms = nxt if nxt is not None and nxt < end_ms else None
    return out


def per_job(decisions: dict[tuple[str, int], tuple[str, bool]]) -> dict[str, Counter[str]]:
    jobs: dict[str, Counter[str]] = {}
    for (job_id, _), (fate, late) in decisions.items():
        c = jobs.setdefault(job_id, Counter())
        c[fate] += 1
        c["late"] += late
    return jobs


@pytest.mark.parametrize(("overlap", "misfire"), POLICIES)
def test_the_models_scan_decides_every_fire_as_the_kits_scan(overlap, misfire):
    sets = (f"workload.overlap={overlap}", f"workload.misfire={misfire}")
    model, kit = model_decisions(*sets), kit_decisions(*sets)
    assert per_job(model) == per_job(kit)
    assert model == kit  # fire by fire, not only in total
    fates = Counter(f for f, _ in kit.values())
    # the workload exercises the policy: some fires were late, and each rule acted
    assert sum(late for _, late in kit.values()) > 0
    if misfire != "run_all":
        assert fates["misfire"] > 0
    expect = {"allow": "fired", "forbid": "overlap", "queue": "queued", "replace": "fired"}
    assert fates[expect[overlap]] > 0
    if overlap in ("allow", "replace"):
        assert fates["overlap"] == fates["queued"] == 0


def test_replace_cancels_and_queue_runs_one_at_a_time():
    s_replace = load_scenario(SCENARIO, ["workload.overlap=replace"])
    m = Model(s_replace, load_profile(None, s_replace["profile"]), 1)
    m.run()
    a = m.stats.counts
    assert m.counters["overlap_cancelled"] > 0
    assert a["cancelled"] > 0 and a["dropped"] == 0
    assert a["succeeded"] + a["cancelled"] == a["generated"] - a["skipped"]
    s_queue = load_scenario(SCENARIO, ["workload.overlap=queue"])
    q = Model(s_queue, load_profile(None, s_queue["profile"]), 1)
    q.run()
    c = q.stats.counts
    assert q.counters["overlap_queued"] > 0
    assert c["succeeded"] == c["generated"] - c["skipped"]  # every queued run ran
    assert c["in_flight_at_end"] == 0


@pytest.mark.parametrize("change", ["misfire rule", "overlap rule"])
def test_a_changed_core_rule_changes_the_kit_and_the_model_alike(monkeypatch, change):
    """Change one rule in kit.core: the kit's decisions (through decide_scan, the entry
    point its scan calls) and the model's both change, and still agree fire by fire."""
    sets = ("workload.overlap=forbid", "workload.misfire=run_once")
    before_kit, before_model = kit_decisions(*sets), model_decisions(*sets)
    assert before_model == before_kit
    if change == "misfire rule":
        # every missed fire runs, whatever the job's policy says
        real_plan = kit.core.trigger.plan_misfire
        monkeypatch.setattr(
            kit.core.trigger,
            "plan_misfire",
            lambda missed, now, policy: real_plan(missed, now, policies.MisfirePolicy("run_all")),
        )
    else:
        # forbid behaves as allow: an overlapping fire fires
        real_overlap = kit.core.trigger.decide_overlap
        monkeypatch.setattr(
            kit.core.trigger,
            "decide_overlap",
            lambda policy, n: real_overlap(policies.OverlapPolicy.allow, n),
        )
    after_kit, after_model = kit_decisions(*sets), model_decisions(*sets)
    assert after_kit != before_kit
    assert after_model != before_model
    assert after_model == after_kit
    fates = Counter(f for f, _ in after_kit.values())
    before = Counter(f for f, _ in before_kit.values())
    if change == "misfire rule":
        assert fates["misfire"] == 0 < before["misfire"]
    else:
        assert fates["overlap"] == 0 < before["overlap"]


def test_the_models_misfire_grace_is_the_kit_nodes():
    """The grace follows the lease TTL as the kit's node computes it (NodeConfig)."""
    from kit.scheduler.node import NodeConfig

    for ttl_s in (10, 30):
        s = load_scenario(SCENARIO, [f"leases.partition_ttl_s={ttl_s}.0", "duration_s=10"])
        m = Model(s, load_profile(None, s["profile"]), 1)
        assert m.misfire_grace_ms == NodeConfig(lease_ttl_ms=ttl_s * 1000).misfire_grace_ms


def test_a_catch_up_cut_into_batches_still_fires_a_run_once_job_once():
    """After the outage the model's scan takes 20 rows at a time (the batch limit), so a
    job's missed fires come in separate scans; run_once must still fire only the last
    (the core's 'more late fires follow' rule), as the kit's unbatched scan does."""
    sets = ("workload.overlap=allow", "workload.misfire=run_once")
    kit = kit_decisions(*sets)
    batched = model_decisions(*sets, "leases.scan_batch_rows=20")

    def fates(d: dict[tuple[str, int], tuple[str, bool]]) -> dict[tuple[str, int], str]:
        return {k: fate for k, (fate, _) in d.items()}

    assert fates(batched) == fates(kit)
    assert Counter(fates(kit).values())["misfire"] == 40  # one of the two missed, per job
