from hypothesis import given
from hypothesis import strategies as st

from kit.core.recovery import QueueSample, caught_up_at


def test_the_newest_sample_the_group_passed():
    samples = [
        QueueSample(1_000, {0: 5, 1: 2}),
        QueueSample(2_000, {0: 9, 1: 2}),
        QueueSample(3_000, {0: 12, 1: 7}),
    ]
    assert caught_up_at(samples, {0: 9, 1: 3}) == 2_000
    assert caught_up_at(samples, {0: 4, 1: 9}) is None  # lags on partition 0
    assert caught_up_at(samples, {0: 12, 1: 7}) == 3_000
    assert caught_up_at(samples, {1: 7}) is None  # no commit on 0 yet: nothing read
    assert caught_up_at([QueueSample(5, {0: 0})], {}) == 5  # an empty topic is passed
    assert caught_up_at([], {0: 100}) is None


@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.dictionaries(st.integers(0, 3), st.integers(0, 50))),
        max_size=8,
    ),
    st.dictionaries(st.integers(0, 3), st.integers(0, 60)),
)
def test_the_answer_is_a_passed_sample_and_no_newer_one_is_passed(raw, committed):
    samples = [QueueSample(t, high) for t, high in raw]

    def passed(s: QueueSample) -> bool:
        return all(committed.get(p, 0) >= h for p, h in s.high.items())

    got = caught_up_at(samples, committed)
    if got is None:
        assert not any(passed(s) for s in samples)
    else:
        assert any(s.taken_at_ms == got and passed(s) for s in samples)
        assert not any(passed(s) and s.taken_at_ms > got for s in samples)
