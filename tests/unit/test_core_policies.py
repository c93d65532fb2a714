import pytest

from kit.core.errors import FieldError
from kit.core.policies import (
    MisfirePolicy,
    OverlapAction,
    OverlapPolicy,
    decide_overlap,
    plan_misfire,
)

MISSED = [1_000, 61_000, 121_000, 181_000]
NOW = 200_000


def test_run_all_fires_every_missed_time():
    plan = plan_misfire(MISSED, NOW, MisfirePolicy("run_all"))
    assert plan.fire_ms == MISSED and plan.skipped_ms == []


def test_run_once_fires_only_the_latest():
    plan = plan_misfire(list(reversed(MISSED)), NOW, MisfirePolicy("run_once"))
    assert plan.fire_ms == [181_000]
    assert plan.skipped_ms == [1_000, 61_000, 121_000]


def test_skip_late_uses_the_deadline_inclusively():
    plan = plan_misfire(MISSED, NOW, MisfirePolicy("skip_late", deadline_s=79))
    assert plan.fire_ms == [121_000, 181_000]
    assert plan.skipped_ms == [1_000, 61_000]


def test_nothing_missed_nothing_planned():
    plan = plan_misfire([], NOW, MisfirePolicy("run_once"))
    assert plan.fire_ms == [] and plan.skipped_ms == []


def test_misfire_parse():
    assert MisfirePolicy.parse(None) == MisfirePolicy()
    assert MisfirePolicy.parse("run_all").kind == "run_all"
    p = MisfirePolicy.parse({"kind": "skip_late", "deadline_s": 30})
    assert MisfirePolicy.parse(p.to_dict()) == p
    for bad, field in [
        ({"kind": "sometimes"}, "misfire.kind"),
        ({"kind": "skip_late", "deadline_s": -1}, "misfire.deadline_s"),
        ({"kind": "run_all", "extra": 1}, "misfire.extra"),
    ]:
        with pytest.raises(FieldError) as exc:
            MisfirePolicy.parse(bad)
        assert exc.value.field == field


@pytest.mark.parametrize(
    ("policy", "running", "action"),
    [
        (OverlapPolicy.allow, 3, OverlapAction.fire),
        (OverlapPolicy.forbid, 0, OverlapAction.fire),
        (OverlapPolicy.forbid, 1, OverlapAction.skip),
        (OverlapPolicy.queue, 0, OverlapAction.fire),
        (OverlapPolicy.queue, 2, OverlapAction.queue),
        (OverlapPolicy.replace, 0, OverlapAction.fire),
        (OverlapPolicy.replace, 1, OverlapAction.fire_and_cancel_running),
    ],
)
def test_decide_overlap(policy, running, action):
    assert decide_overlap(policy, running) is action


def test_overlap_parse():
    assert OverlapPolicy.parse("queue") is OverlapPolicy.queue
    assert OverlapPolicy.parse(None) is OverlapPolicy.allow
    with pytest.raises(FieldError):
        OverlapPolicy.parse("sometimes")


def test_only_a_queueing_or_unknown_job_may_hold_queued_runs() -> None:
    """Every policy under which decide_overlap can answer `queue` may hold runs back, and
    no other does; an unknown policy (a deleted job) is treated as one that might."""
    from kit.core.policies import OverlapAction, may_hold_queued_runs

    for policy in OverlapPolicy:
        queues = any(decide_overlap(policy, n) is OverlapAction.queue for n in range(3))
        assert may_hold_queued_runs(policy.value) is queues, policy
    assert may_hold_queued_runs(None)


def test_a_runs_end_releases_the_oldest_queued_runs_first() -> None:
    from kit.core.policies import QueuedRun, queued_to_release

    queued = [QueuedRun("b", 2000, 0), QueuedRun("c", 1000, 0), QueuedRun("a", 2000, 0)]
    assert queued_to_release(queued, 0) == []
    assert queued_to_release(queued, 1) == ["c"]
    assert queued_to_release(queued, 2) == ["c", "a"]  # same time: by run id
    assert queued_to_release(queued, 9) == ["c", "a", "b"]
    with pytest.raises(ValueError, match=r"^ended must not be negative$"):
        queued_to_release(queued, -1)


def test_an_orphaned_queued_run_is_released_only_with_nothing_busy_after_the_grace() -> None:
    from kit.core.policies import QueuedRun, orphaned_queued_to_release

    queued = [QueuedRun("new", 1000, 9_500), QueuedRun("old", 2000, 1_000)]
    assert orphaned_queued_to_release(queued, 1, 10_000, 5_000) is None  # a run is busy
    # the oldest of those committed before the grace, not the oldest of all
    assert orphaned_queued_to_release(queued, 0, 10_000, 5_000) == "old"
    assert orphaned_queued_to_release(queued, 0, 6_000, 5_000) is None  # 1_000 is not < 1_000
    assert orphaned_queued_to_release([], 0, 10_000, 5_000) is None
    # of several past the grace, the oldest by scheduled time (not by id or by commit)
    several = [QueuedRun("a", 3000, 500), QueuedRun("c", 1000, 2_000), QueuedRun("b", 1000, 900)]
    assert orphaned_queued_to_release(several, 0, 10_000, 5_000) == "b"
