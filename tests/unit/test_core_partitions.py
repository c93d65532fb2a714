from collections import Counter

import pytest

from kit.core.partitions import PARTITION_COUNT, assign_partitions, partition_of


def test_partition_of_is_stable_and_in_range():
    assert partition_of("job-1") == partition_of("job-1")
    assert all(0 <= partition_of(f"j{i}") < PARTITION_COUNT for i in range(500))
    with pytest.raises(ValueError):
        partition_of("x", 0)


def test_empty_nodes_assign_nothing():
    assert assign_partitions(16, [], {}) == {}


def test_balanced_from_scratch_and_deterministic():
    nodes = ["c", "a", "b"]
    a = assign_partitions(1024, nodes, {})
    assert set(a) == set(range(1024))
    counts = Counter(a.values())
    assert max(counts.values()) - min(counts.values()) <= 1
    assert assign_partitions(1024, list(reversed(nodes)), {}) == a


def test_join_moves_only_to_the_new_node():
    before = assign_partitions(1024, ["a", "b", "c"], {})
    after = assign_partitions(1024, ["a", "b", "c", "d"], before)
    moved = {p for p in before if before[p] != after[p]}
    assert all(after[p] == "d" for p in moved)
    assert len(moved) == 256


def test_leave_moves_only_the_leavers_partitions():
    before = assign_partitions(1024, ["a", "b", "c", "d"], {})
    after = assign_partitions(1024, ["a", "b", "c"], before)
    moved = {p for p in before if before[p] != after[p]}
    assert moved == {p for p, n in before.items() if n == "d"}
    counts = Counter(after.values())
    assert max(counts.values()) - min(counts.values()) <= 1


def test_unknown_owners_and_out_of_range_partitions_are_ignored():
    a = assign_partitions(4, ["a"], {0: "gone", 7: "a"})
    assert a == {0: "a", 1: "a", 2: "a", 3: "a"}


def test_duplicate_node_names_count_once():
    a = assign_partitions(10, ["a", "a", "b"], {})
    assert Counter(a.values()) == {"a": 5, "b": 5}


def test_no_partitions_assign_nothing_and_a_negative_count_is_a_bug():
    assert assign_partitions(0, ["a", "b"], {}) == {}
    with pytest.raises(ValueError, match=r"^partitions must not be negative$"):
        assign_partitions(-1, ["a"], {})


def test_the_larger_quota_goes_to_the_node_holding_more_counting_partition_zero():
    # b holds partition 0: b keeps it and gets the one extra of 3 over 2 nodes
    assert assign_partitions(3, ["a", "b"], {0: "b"}) == {0: "b", 1: "a", 2: "b"}
    # a holding out of range (3 is no partition of 3) counts for nothing: ties by name
    assert assign_partitions(3, ["b", "a"], {3: "b"}) == {0: "a", 1: "a", 2: "b"}
    # more held wins over the name
    assert assign_partitions(5, ["a", "b"], {0: "b", 1: "b", 2: "a"}) == {
        0: "b",
        1: "b",
        2: "a",
        3: "a",
        4: "b",
    }
