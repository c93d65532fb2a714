"""The API's log filter (kit.api.safe_log.ScrubSecrets) and the one-line description of
an exception: no value a caller sent survives them."""

from __future__ import annotations

import logging
import sys

import pytest

from kit.api.safe_log import ScrubSecrets, describe, scrub

SECRET = "LEAKME-42af"


@pytest.mark.parametrize(
    "text",
    [
        "unsupported Unicode escape sequence\nDETAIL:  x\n"
        f'CONTEXT:  JSON data, line 1: {{"Authorization": "Bearer {SECRET}"',
        f'invalid input syntax for type uuid: "urn:uuid:{SECRET}"',
        f"Authorization: Bearer {SECRET}",
        f"Authorization: basic {SECRET}",
        f"posting to https://user:{SECRET}@hooks.example.org/x",
        f"token cf_0123456789abcdef_{SECRET}",
        f"LINE 1: SELECT '{SECRET}'",
    ],
)
def test_scrub_removes_the_value(text: str) -> None:
    assert SECRET not in scrub(text)


def _record(msg: str, *args: object, name: str = "x", exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError(f'invalid input syntax for type uuid: "{SECRET}"')
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, exc_info)


def test_a_traceback_becomes_its_kind_and_place() -> None:
    record = _record("failed for %s", f"Bearer {SECRET}", exc=True)
    assert ScrubSecrets().filter(record)
    text = logging.Formatter().format(record)
    assert SECRET not in text
    assert "ValueError" in text and "test_api_safe_log.py" in text
    assert record.exc_info is None and "Traceback" not in text


def test_access_lines_keep_their_shape() -> None:
    """uvicorn's access formatter reads the request line from the args."""
    record = _record(
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:1",
        "GET",
        f"/hook?u=https://a:{SECRET}@h/",
        "1.1",
        200,
        name="uvicorn.access",
    )
    assert ScrubSecrets().filter(record)
    assert isinstance(record.args, tuple) and len(record.args) == 5
    assert SECRET not in record.getMessage()


def test_describe_names_classes_and_places_not_messages() -> None:
    try:
        try:
            raise KeyError(SECRET)
        except KeyError as inner:
            raise RuntimeError(SECRET) from inner
    except RuntimeError as exc:
        line = describe(exc)
    assert SECRET not in line
    assert "builtins.RuntimeError <- builtins.KeyError" in line and "test_api_safe_log.py" in line
