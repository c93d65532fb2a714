import pytest

from kit.core.errors import FieldError
from kit.core.jitter import jitter_offset_ms


def test_same_job_same_offset_and_in_range():
    assert jitter_offset_ms("job-a", 60_000) == jitter_offset_ms("job-a", 60_000)
    offsets = {jitter_offset_ms(f"job-{i}", 60_000) for i in range(200)}
    assert all(0 <= o < 60_000 for o in offsets)
    assert len(offsets) > 150  # it actually spreads


def test_zero_means_off_and_negative_is_refused():
    assert jitter_offset_ms("job-a", 0) == 0
    with pytest.raises(FieldError) as exc:
        jitter_offset_ms("job-a", -1)
    assert exc.value.field == "jitter_ms"
