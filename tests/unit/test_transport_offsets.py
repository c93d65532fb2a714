"""The offsets a consumer owes its group (kit.core.offsets): a failed commit is
owed again, never behind what came later, and dropped with its partition."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kit.core.offsets import PendingOffsets


def test_what_was_returned_is_owed_up_to_the_next_offset() -> None:
    owed = PendingOffsets()
    for p, off in [(0, 5), (0, 3), (1, 9)]:
        owed.returned(p, off)
    assert owed.take({0, 1}) == {0: 6, 1: 10}
    assert not owed and owed.take({0, 1}) == {}


def test_a_failed_commit_is_owed_again_until_one_succeeds() -> None:
    """The defect: the offsets of a failed commit were dropped, and with no later
    message on the partition its committed offset stayed behind for good."""
    owed = PendingOffsets()
    owed.returned(2, 41)
    offsets = owed.take({2})
    owed.failed(offsets)
    assert owed.take({2}) == {2: 42}


def test_a_failed_commit_never_moves_an_offset_back() -> None:
    owed = PendingOffsets()
    owed.returned(0, 10)
    first = owed.take({0})
    owed.returned(0, 20)  # returned while the first commit was failing
    owed.failed(first)
    assert owed.take({0}) == {0: 21}


def test_an_async_commit_failing_after_a_later_one_was_sent_is_not_owed() -> None:
    """Commits are asynchronous: re-sending the older offset after the later one
    succeeded would move the group's committed offset back."""
    owed = PendingOffsets()
    owed.returned(0, 10)
    older = owed.take({0})
    owed.returned(0, 20)
    later = owed.take({0})
    owed.failed(older)
    assert not owed
    owed.failed(later)  # the latest sent failed: owed again
    assert owed.take({0}) == {0: 21}


def test_a_failed_commit_of_a_partition_revoked_meanwhile_is_not_owed() -> None:
    owed = PendingOffsets()
    owed.returned(1, 5)
    sent = owed.take({1})
    owed.revoked({1})
    owed.failed(sent)
    assert not owed


def test_a_revoked_or_unassigned_partition_is_not_committed() -> None:
    owed = PendingOffsets()
    owed.returned(0, 1)
    owed.returned(1, 1)
    owed.revoked({1})
    assert owed.take({0}) == {0: 2}  # 1 is no longer ours: dropped, not kept


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 50), st.booleans()), max_size=60))
def test_what_is_committed_per_partition_never_goes_back(
    steps: list[tuple[int, int, bool]],
) -> None:
    """Any run of returns (each partition's offsets rising, as a consumer hands them
    out), successful and failed commits: each commit of a partition is at least its
    previous one, and the last covers every offset returned."""
    owed = PendingOffsets()
    committed: dict[int, int] = {}
    highest: dict[int, int] = {}
    for p, step, fails in steps:
        off = highest.get(p, -1) + step
        owed.returned(p, off)
        highest[p] = off
        offsets = owed.take({0, 1, 2, 3})
        if fails:
            owed.failed(offsets)
            continue
        for q, nxt in offsets.items():
            assert nxt >= committed.get(q, 0)
            committed[q] = nxt
    for q, nxt in owed.take({0, 1, 2, 3}).items():
        committed[q] = max(committed.get(q, 0), nxt)
    assert all(committed[q] == highest[q] + 1 for q in highest)
