"""Lifting a kill switch (kit.core.switches.plan_lift): every held run is kept or skipped,
never both nor neither; only late first-attempt schedule runs can be skipped; and for
those the decision is the job's misfire policy, exactly as the scheduler takes it after
an outage (kit.core.policies.plan_misfire)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.policies import MISFIRE_KINDS, MisfirePolicy, plan_misfire
from kit.core.switches import HeldRun, plan_lift

NOW_MS = 10_000_000
GRACE_MS = 14_000

policies = st.builds(
    MisfirePolicy,
    kind=st.sampled_from(MISFIRE_KINDS),
    deadline_s=st.integers(min_value=0, max_value=3600),
)


@st.composite
def held_runs(draw: st.DrawFn) -> list[HeldRun]:
    jobs = draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=40))
    runs = []
    for i, job in enumerate(jobs):
        runs.append(
            HeldRun(
                run_id=f"r{i}",
                job_id=job,
                # distinct seconds per job (a run id is its job and its instant)
                scheduled_at_ms=NOW_MS - draw(st.integers(0, 7200)) * 1000 - i,
                trigger_kind=draw(st.sampled_from(["schedule", "schedule", "manual", "backfill"])),
                attempt=draw(st.sampled_from([1, 1, 1, 2])),
            )
        )
    return runs


@settings(max_examples=300, deadline=None)
@given(held_runs(), st.dictionaries(st.sampled_from("abc"), policies))
def test_every_held_run_is_kept_or_skipped_once(
    held: list[HeldRun], job_policies: dict[str, MisfirePolicy]
) -> None:
    plan = plan_lift(held, job_policies, NOW_MS, GRACE_MS)
    assert sorted(plan.kept + plan.skipped) == sorted(r.run_id for r in held)
    assert not set(plan.kept) & set(plan.skipped)


@settings(max_examples=300, deadline=None)
@given(held_runs(), st.dictionaries(st.sampled_from("abc"), policies))
def test_only_late_schedule_runs_go_through_the_misfire_policy(
    held: list[HeldRun], job_policies: dict[str, MisfirePolicy]
) -> None:
    plan = plan_lift(held, job_policies, NOW_MS, GRACE_MS)
    late_before = NOW_MS - GRACE_MS
    for run in held:
        subject = (
            run.trigger_kind == "schedule"
            and run.attempt == 1
            and run.scheduled_at_ms < late_before
            and run.job_id in job_policies
        )
        if not subject:
            assert run.run_id in plan.kept
    for job, policy in job_policies.items():
        late = [
            r
            for r in held
            if r.job_id == job
            and r.trigger_kind == "schedule"
            and r.attempt == 1
            and r.scheduled_at_ms < late_before
        ]
        expected = set(plan_misfire([r.scheduled_at_ms for r in late], NOW_MS, policy).skipped_ms)
        assert {r.run_id for r in late if r.scheduled_at_ms in expected} == {
            r for r in plan.skipped if r in {x.run_id for x in late}
        }


def test_skip_late_skips_a_run_held_past_its_deadline_and_keeps_a_recent_one() -> None:
    old = HeldRun("old", "j", NOW_MS - 600_000, "schedule", 1)
    recent = HeldRun("recent", "j", NOW_MS - 20_000, "schedule", 1)
    manual = HeldRun("manual", "j", NOW_MS - 600_000, "manual", 1)
    plan = plan_lift([old, recent, manual], {"j": MisfirePolicy("skip_late", 60)}, NOW_MS, GRACE_MS)
    assert (sorted(plan.kept), plan.skipped) == (["manual", "recent"], ["old"])


def test_run_once_keeps_only_the_latest_late_run() -> None:
    runs = [HeldRun(f"r{i}", "j", NOW_MS - 60_000 * (i + 1), "schedule", 1) for i in range(3)]
    plan = plan_lift(runs, {"j": MisfirePolicy("run_once")}, NOW_MS, GRACE_MS)
    assert (plan.kept, sorted(plan.skipped)) == (["r0"], ["r1", "r2"])
