"""kit.core.preemption.to_preempt: which free run a full worker stops for a waiting
paid run, case by case (the rules in its docstring)."""

from __future__ import annotations

from kit.core.preemption import Running, Waiting, to_preempt

PAID, FREE = True, False


def free(key: str, started_ms: int, tier: int = 2, stopping: bool = False) -> Running:
    return Running(key, FREE, tier, started_ms, stopping)


def test_a_paid_run_on_a_worker_full_of_free_runs_stops_the_youngest() -> None:
    running = [free("a", 1_000), free("b", 3_000), free("c", 2_000)]
    assert to_preempt(3, running, [Waiting(PAID, 2)]) == ["b"]


def test_no_preemption_while_a_slot_is_free() -> None:
    running = [free("a", 1_000), free("b", 3_000)]
    assert to_preempt(3, running, [Waiting(PAID, 2), Waiting(PAID, 2)]) == []


def test_a_paid_run_is_never_preempted() -> None:
    running = [Running("p", PAID, 2, 5_000), free("a", 1_000)]
    assert to_preempt(2, running, [Waiting(PAID, 2)] * 3) == ["a"]
    assert to_preempt(1, [Running("p", PAID, 3, 5_000)], [Waiting(PAID, 0)]) == []


def test_one_preemption_per_waiting_paid_run_counting_those_already_stopping() -> None:
    running = [free("a", 1_000, stopping=True), free("b", 2_000), free("c", 3_000)]
    assert to_preempt(3, running, [Waiting(PAID, 2)]) == []  # "a" is stopping for it
    assert to_preempt(3, running, [Waiting(PAID, 2)] * 2) == ["c"]
    assert sorted(to_preempt(3, running, [Waiting(PAID, 2)] * 5)) == ["b", "c"]


def test_free_runs_waiting_take_no_slot_back() -> None:
    assert to_preempt(1, [free("a", 1_000)], [Waiting(FREE, 2)]) == []


def test_a_free_run_waiting_in_a_more_urgent_tier_goes_first_so_nothing_is_preempted() -> None:
    # the freed slot would go to the free `high` run, not to the paid `normal` one
    running = [free("a", 1_000), free("b", 2_000)]
    assert to_preempt(2, running, [Waiting(PAID, 2), Waiting(FREE, 1)]) == []
    # a free run of the same tier waits behind the paid one: the paid one preempts
    assert to_preempt(2, running, [Waiting(PAID, 2), Waiting(FREE, 2)]) == ["b"]


def test_a_more_urgent_free_run_is_not_preempted_for_a_less_urgent_paid_one() -> None:
    running = [free("crit", 9_000, tier=0), free("low", 1_000, tier=3)]
    assert to_preempt(2, running, [Waiting(PAID, 2)]) == ["low"]
    assert to_preempt(1, [free("crit", 9_000, tier=0)], [Waiting(PAID, 2)]) == []


def test_the_least_urgent_tier_goes_first_then_the_youngest() -> None:
    running = [free("n-old", 1_000, tier=2), free("n-young", 5_000, tier=2), free("l", 0, 3)]
    assert to_preempt(3, running, [Waiting(PAID, 0)]) == ["l"]
    assert to_preempt(3, running, [Waiting(PAID, 0)] * 2) == ["l", "n-young"]


def test_the_runs_chosen_serve_the_paid_runs_in_the_order_they_start() -> None:
    # the `critical` paid run starts first and may take either; the `low` one only the
    # `low` run: both are served
    running = [free("n", 5_000, tier=2), free("l", 1_000, tier=3)]
    got = to_preempt(2, running, [Waiting(PAID, 0), Waiting(PAID, 3)])
    assert sorted(got) == ["l", "n"]
    # the first paid run (high) can be served, the second (low) cannot once the low
    # free run went to the first: only as many as the queue's order can use
    running = [free("c", 5_000, tier=0), free("l", 1_000, tier=3)]
    assert to_preempt(2, running, [Waiting(PAID, 1), Waiting(PAID, 3)]) == ["l"]


def test_one_paid_run_served_when_a_second_cannot_be() -> None:
    # three `normal` paid runs waiting; of the free runs only the `low` one may be
    # taken for them (the others are `critical`): one is stopped, not none
    running = [free("l", 1_000, tier=3), free("c1", 2_000, tier=0), free("c2", 3_000, tier=0)]
    assert to_preempt(3, running, [Waiting(PAID, 1)] * 3) == ["l"]


def test_waiting_runs_count_each_paid_run_up_to_the_slots_and_one_per_free_group() -> None:
    from kit.core.preemption import waiting_of

    got = waiting_of([(True, 1, 5), (False, 0, 7), (True, 2, 1)], slots=3)
    assert got == [Waiting(True, 1)] * 3 + [Waiting(False, 0), Waiting(True, 2)]


def test_a_run_preempted_as_often_as_its_bound_allows_is_not_preempted_again() -> None:
    # "young" would go first, but it has been preempted its tenant's bound times already
    young = Running("young", FREE, 2, 9_000, preemptions=2, max_preemptions=2)
    old = Running("old", FREE, 2, 1_000, preemptions=1, max_preemptions=2)
    assert to_preempt(2, [young, old], [Waiting(PAID, 2)]) == ["old"]
    # every run at its bound: the paid run waits for a slot to free
    spent = Running("old", FREE, 2, 1_000, preemptions=2, max_preemptions=2)
    assert to_preempt(2, [young, spent], [Waiting(PAID, 2)] * 2) == []
    # a bound of 0: never preempted; no bound given: any number of times
    never = Running("never", FREE, 2, 5_000, max_preemptions=0)
    assert to_preempt(1, [never], [Waiting(PAID, 2)]) == []
    again = Running("again", FREE, 2, 5_000, preemptions=50)
    assert to_preempt(1, [again], [Waiting(PAID, 2)]) == ["again"]
    # a run at its bound still holds its slot: no preemption while a slot is free is
    # judged on every run, and the others keep their order
    runs = [spent, free("a", 3_000), free("b", 4_000)]
    assert to_preempt(3, runs, [Waiting(PAID, 2)] * 3) == ["b", "a"]
