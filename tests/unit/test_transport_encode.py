"""kit.transport.publisher.encode: the fast serialisation is byte for byte
RunMessage.to_bytes(); ids are UUIDs (anything else is refused, it could only poison a
claim), so formatting never needs JSON escaping."""

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.dispatch import PRIORITY_TIERS
from kit.transport.message import RunMessage
from kit.transport.publisher import encode

ids = st.uuids().map(str)


@settings(max_examples=300)
@given(ids, ids, st.integers(1, 10**6), st.integers(0, 2**62), st.sampled_from(PRIORITY_TIERS))
def test_encode_equals_to_bytes(run_id, job_id, attempt, at_ms, tier):
    m = RunMessage(run_id, job_id, attempt, at_ms, tier)
    enc = encode(m)
    assert enc.value == m.to_bytes()
    assert RunMessage.from_bytes(enc.value) == m
    assert (enc.run_id, enc.tier, enc.key) == (run_id, tier, job_id.encode())


def test_a_uuid_message_takes_the_formatted_path_and_parses_back():
    m = RunMessage(str(uuid.uuid4()), str(uuid.uuid4()), 3, 1_900_000_000_123, "critical")
    assert RunMessage.from_bytes(encode(m).value) == m


@given(st.text(max_size=40).filter(lambda t: not _uuid_like(t)))
def test_an_id_that_is_not_a_uuid_is_refused(text):
    import pytest

    from kit.transport.message import MessageError

    with pytest.raises(MessageError, match="UUID"):
        RunMessage(text, str(uuid.uuid4()), 1, 0, "normal")
    with pytest.raises(MessageError, match="UUID"):
        RunMessage(str(uuid.uuid4()), text, 1, 0, "normal")


def _uuid_like(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def test_the_scheduler_the_reaper_and_a_worker_make_one_message_of_a_run():
    """RunMessage.of is the one constructor: the scheduler's held run (milliseconds, its
    due time apart) and the store's RunPointer (a datetime, the job's priority) that the
    reaper and workers publish again give the same message, byte for byte."""
    from datetime import UTC, datetime

    from kit.core.timeutil import to_epoch_ms
    from kit.scheduler.scan import HeldRun
    from kit.store.claims import RunPointer

    run_id, job_id = str(uuid.uuid4()), str(uuid.uuid4())
    at = datetime(2030, 1, 1, 9, 0, 0, 250_000, tzinfo=UTC)
    jittered_due_ms = to_epoch_ms(at) + 7_000  # the message names the scheduled second
    held = HeldRun(run_id, job_id, 2, to_epoch_ms(at), jittered_due_ms, "high", 17, 4)
    pointer = RunPointer(run_id, job_id, 2, at, "high")
    expected = RunMessage(run_id, job_id, 2, 1_893_488_400_250, "high")
    assert RunMessage.of(held) == RunMessage.of(pointer) == expected
    assert held.message == encode(RunMessage.of(pointer))
    assert RunMessage.from_bytes(held.message.value) == expected
