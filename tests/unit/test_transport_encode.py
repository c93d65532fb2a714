"""kit.transport.publisher.encode: the fast serialisation is byte for byte
RunMessage.to_bytes(), for plain UUID ids and for ids that need JSON escaping."""

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.dispatch import PRIORITY_TIERS
from kit.transport.message import RunMessage
from kit.transport.publisher import encode

ids = st.one_of(
    st.uuids().map(str),
    st.text(min_size=1, max_size=40),
    st.text(alphabet="abcXYZ019-", min_size=1, max_size=40),
)


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
