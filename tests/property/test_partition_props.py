"""Assignment of partitions to nodes: balanced, deterministic, and minimal in movement
when one node joins or leaves."""

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.partitions import assign_partitions

NAMES = [f"node-{i:02d}" for i in range(40)]
node_sets = st.lists(st.sampled_from(NAMES), min_size=1, max_size=12, unique=True)
partition_counts = st.one_of(st.integers(1, 300), st.just(1024))


def _balanced(assignment, partitions, nodes):
    assert set(assignment) == set(range(partitions))
    assert set(assignment.values()) <= set(nodes)
    counts = dict.fromkeys(nodes, 0)
    for owner in assignment.values():
        counts[owner] += 1
    assert max(counts.values()) - min(counts.values()) <= 1


def arbitrary_current(seed: int, partitions: int) -> dict[int, str]:
    """Any mapping at all: unbalanced, with dead owners, gaps and stray partitions."""
    rng = random.Random(seed)
    owners = rng.sample(NAMES, rng.randint(1, 8))
    return {p: rng.choice(owners) for p in range(partitions + 5) if rng.random() < 0.8}


@settings(max_examples=80, deadline=None)
@given(st.data(), partition_counts, node_sets)
def test_balanced_and_deterministic_from_any_current(data, partitions, nodes):
    current = arbitrary_current(data.draw(st.integers(0, 2**32)), partitions)
    a = assign_partitions(partitions, nodes, current)
    _balanced(a, partitions, nodes)
    shuffled = nodes[:]
    random.Random(data.draw(st.integers())).shuffle(shuffled)
    reordered = dict(sorted(current.items(), reverse=True))
    assert assign_partitions(partitions, shuffled, reordered) == a
    # a balanced assignment is a fixed point: nothing moves without a reason
    assert assign_partitions(partitions, nodes, a) == a


@settings(max_examples=80, deadline=None)
@given(partition_counts, node_sets, st.sampled_from(NAMES))
def test_join_moves_only_partitions_to_the_newcomer(partitions, nodes, newcomer):
    if newcomer in nodes:
        return
    before = assign_partitions(partitions, nodes, {})
    after = assign_partitions(partitions, [*nodes, newcomer], before)
    _balanced(after, partitions, [*nodes, newcomer])
    moved = [p for p in before if before[p] != after[p]]
    assert all(after[p] == newcomer for p in moved)
    assert len(moved) == Counter(after.values())[newcomer]


@settings(max_examples=80, deadline=None)
@given(partition_counts, node_sets.filter(lambda n: len(n) >= 2), st.integers(0, 11))
def test_leave_moves_only_the_leavers_partitions(partitions, nodes, which):
    leaver = nodes[which % len(nodes)]
    before = assign_partitions(partitions, nodes, {})
    stayers = [n for n in nodes if n != leaver]
    after = assign_partitions(partitions, stayers, before)
    _balanced(after, partitions, stayers)
    moved = {p for p in before if before[p] != after[p]}
    assert moved == {p for p, n in before.items() if n == leaver}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(NAMES)), min_size=1, max_size=15))
def test_membership_churn_stays_balanced_and_minimal(changes):
    nodes: list[str] = ["node-00"]
    current = assign_partitions(1024, nodes, {})
    for join, name in changes:
        if join and name not in nodes:
            nxt = [*nodes, name]
        elif not join and name in nodes and len(nodes) > 1:
            nxt = [n for n in nodes if n != name]
        else:
            continue
        after = assign_partitions(1024, nxt, current)
        _balanced(after, 1024, nxt)
        moved = [p for p in current if current[p] != after[p]]
        if join:
            assert all(after[p] == name for p in moved)
        else:
            assert all(current[p] == name for p in moved)
        nodes, current = nxt, after
