import pytest

from kit.core.invariants import (
    InvariantViolation,
    check_monotonic_epochs,
    check_single_holder,
    check_unique_runs,
)
from kit.core.leases import PartitionLease


def test_single_holder_accepts_handover_and_release():
    check_single_holder(
        [
            PartitionLease(1, "a", 1, 100),
            PartitionLease(1, "a", 1, 200),
            PartitionLease(1, None, 1, 0),
            PartitionLease(1, "b", 2, 300),
            (2, 1, "b"),
            {"partition_id": 3, "epoch": 1, "owner": "a"},
        ]
    )


def test_single_holder_catches_two_owners_of_one_epoch():
    with pytest.raises(InvariantViolation, match="held by both a and b"):
        check_single_holder([(1, 4, "a"), (2, 4, "b"), (1, 4, "b")])


def test_monotonic_epochs():
    check_monotonic_epochs([(1, 1), (2, 5), (1, 2), (1, 2)])
    with pytest.raises(InvariantViolation):
        check_monotonic_epochs([(1, 3), (1, 2)])


def test_unique_runs():
    check_unique_runs([("j1", 1000), ("j1", 2000), ("j2", 1000)])
    with pytest.raises(InvariantViolation):
        check_unique_runs([{"job_id": "j1", "scheduled_at": 5}, ("j1", 5)])
