"""Conversions between aware datetimes and integer epoch milliseconds (the core's two
representations of time). Nothing here reads a clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_epoch_ms(instant: datetime) -> int:
    if instant.tzinfo is None:
        raise ValueError("naive datetime: the core only takes aware datetimes")
    delta = instant - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_epoch_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)
