"""The batch forms of the job hashes give exactly the one-at-a-time answers."""

import pytest

from kit.core.errors import FieldError
from kit.core.jitter import jitter_offset_ms, jitter_offsets_ms
from kit.core.partitions import partition_of, partitions_of

IDS = [f"job-{i}" for i in range(2000)] + ["", "ü-😀"]


@pytest.mark.parametrize("parts", [1, 7, 64, 1024])
def test_partitions_of_matches_partition_of(parts):
    assert partitions_of(IDS, parts) == [partition_of(j, parts) for j in IDS]


@pytest.mark.parametrize("spread", [0, 1, 999, 60_000])
def test_jitter_offsets_match_jitter_offset(spread):
    assert jitter_offsets_ms(IDS, spread) == [jitter_offset_ms(j, spread) for j in IDS]


def test_batch_forms_refuse_what_the_scalar_ones_refuse():
    with pytest.raises(ValueError):
        partitions_of(IDS, 0)
    with pytest.raises(FieldError):
        jitter_offsets_ms(IDS, -1)
    with pytest.raises(FieldError):
        jitter_offsets_ms(IDS, 1.5)  # type: ignore[arg-type]
