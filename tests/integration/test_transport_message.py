"""RunMessage wire format: versioned JSON, and a clear error for anything else.
(Pure, no broker; kept with the transport tests.)"""

from __future__ import annotations

import json

import pytest

from kit.core.errors import FieldError
from kit.transport import MessageError, RunMessage, topic_for

R1, J1 = "0b7f2a9e-53c1-5d3e-9a0f-6c1d2e3f4a5b", "5f0c1e2d-3b4a-4c5d-8e6f-7a8b9c0d1e2f"
GOOD = {"v": 1, "run_id": R1, "job_id": J1, "attempt": 2, "scheduled_at_ms": 5, "tier": "low"}


def test_round_trip_and_version_field() -> None:
    m = RunMessage(R1, J1, 2, 1_700_000_000_123, "critical")
    assert RunMessage.from_bytes(m.to_bytes()) == m
    assert json.loads(m.to_bytes())["v"] == 1


def test_topic_for_tier() -> None:
    assert topic_for("critical") == "cronfleet.runs.critical"
    assert topic_for("low", "x.y") == "x.y.low"
    with pytest.raises(FieldError, match="priority"):
        topic_for("urgent")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"", "message"),
        (None, "message"),
        (b"{not json", "message"),
        (b"\xff\xfe", "message"),
        (b"[1]", "message"),
        (json.dumps({**GOOD, "v": 2}).encode(), "message.v"),
        (json.dumps({**GOOD, "v": True}).encode(), "message.v"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "v"}).encode(), "message.v"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "job_id"}).encode(), "message.job_id"),
        (json.dumps({**GOOD, "run_id": ""}).encode(), "message.run_id"),
        (json.dumps({**GOOD, "run_id": "not-a-uuid"}).encode(), "message.run_id"),
        (json.dumps({**GOOD, "job_id": 7}).encode(), "message.job_id"),
        (json.dumps({**GOOD, "attempt": 0}).encode(), "message.attempt"),
        (json.dumps({**GOOD, "attempt": "1"}).encode(), "message.attempt"),
        (json.dumps({**GOOD, "scheduled_at_ms": 1.5}).encode(), "message.scheduled_at_ms"),
        (json.dumps({**GOOD, "tier": "urgent"}).encode(), "message.tier"),
    ],
)
def test_malformed_is_refused_naming_the_field(data: bytes | None, field: str) -> None:
    with pytest.raises(MessageError) as info:
        RunMessage.from_bytes(data)
    assert info.value.field == field


def test_constructor_validates_too() -> None:
    with pytest.raises(MessageError):
        RunMessage(R1, J1, 1, 0, "nope")
