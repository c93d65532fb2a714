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


def test_each_violation_says_which_records_break_it():
    with pytest.raises(InvariantViolation) as info:
        check_single_holder([(7, 4, "a"), (7, 4, None), (7, 4, "b")])
    assert str(info.value) == "partition 7 epoch 4 held by both a and b"
    with pytest.raises(InvariantViolation) as info:
        check_monotonic_epochs([(3, 5), (4, 1), (3, 6), (3, 4)])
    assert str(info.value) == "partition 3 epoch went back from 6 to 4"
    with pytest.raises(InvariantViolation) as info:
        check_unique_runs([("j1", 5), ("j2", 5), ("j1", 5)])
    assert str(info.value) == "job j1 has two runs scheduled at 5"


def test_a_released_lease_is_no_holder_and_a_new_epoch_is_not_the_old_one():
    # a released lease (owner None) of an epoch does not take that epoch from its holder
    check_single_holder([(1, 4, None), (1, 4, "a"), (1, 5, "b")])
    # the same node re-granted the same epoch is one holder; another partition is apart
    check_single_holder([(1, 4, "a"), (1, 4, "a"), (2, 4, "b")])


def test_epochs_are_compared_per_partition_and_may_repeat():
    check_monotonic_epochs([(1, 9), (2, 1), (1, 9), (2, 2), (1, 10)])
    with pytest.raises(InvariantViolation):
        check_monotonic_epochs([(1, 9), (2, 1), (1, 8)])


def test_records_by_tuple_key_or_attribute_need_every_field():
    with pytest.raises(ValueError) as info:
        check_single_holder([(1, 4)])
    assert str(info.value) == "record (1, 4) needs partition_id, epoch, owner"
    with pytest.raises(KeyError):
        check_unique_runs([{"job_id": "j1"}])
    # a longer tuple is read by its first fields
    check_unique_runs([("j1", 5, "extra"), ("j1", 6, "extra")])
    with pytest.raises(InvariantViolation, match="job j1 has two runs scheduled at 5"):
        check_unique_runs([("j1", 5, "a"), ("j1", 5, "b")])


def test_a_named_tuple_is_read_by_its_field_names_not_its_order():
    from collections import namedtuple

    Event = namedtuple("Event", "owner epoch partition_id")
    check_single_holder([Event("a", 4, 1), Event("b", 4, 2)])  # two partitions, not (a, 4)
    with pytest.raises(InvariantViolation, match="partition 1 epoch 4 held by both a and b"):
        check_single_holder([Event("a", 4, 1), Event("b", 4, 1)])


def test_epochs_are_read_by_name_from_leases_and_rows():
    with pytest.raises(InvariantViolation, match="partition 2 epoch went back from 5 to 4"):
        check_monotonic_epochs([PartitionLease(2, "a", 5, 0), {"partition_id": 2, "epoch": 4}])
    check_monotonic_epochs([PartitionLease(2, "a", 5, 0), {"partition_id": 3, "epoch": 4}])
