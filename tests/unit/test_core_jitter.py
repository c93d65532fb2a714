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


def test_offsets_are_a_stable_contract():
    """Stored triggers carry fire times computed with these offsets (kit.core.trigger
    subtracts the offset to find the nominal time): a different hash, key size or
    personalisation would move every jittered job after an upgrade. Pinned values."""
    assert [jitter_offset_ms("job-a", m) for m in (1, 1000, 60_000, 10**7)] == [
        0,
        969,
        52_969,
        9_052_969,
    ]
    job = "7b9d3c1e-0000-4000-8000-000000000000"
    assert [jitter_offset_ms(job, m) for m in (1000, 60_000, 10**7)] == [921, 2921, 1_662_921]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, "must be a whole number of milliseconds"),
        ("10", "must be a whole number of milliseconds"),
        (True, "must be a whole number of milliseconds"),
        (-1, "must not be negative"),
    ],
)
def test_bad_jitter_names_the_field_and_the_reason(value, reason):
    with pytest.raises(FieldError) as exc:
        jitter_offset_ms("job-a", value)
    assert (exc.value.field, exc.value.reason) == ("jitter_ms", reason)
