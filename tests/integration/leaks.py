"""Secrets the integration tests plant, and a watch on every log record of the session.

A test that gives the kit a secret (an Authorization header, URL credentials, a
`secret_env` value) takes it from `plant()`: a unique marker, registered for the whole
session. `LeakWatch` is a logging handler on the root logger for the whole session
(tests/integration/conftest.py): every record any code logs, formatted with its
traceback, is searched for every marker planted so far; a hit is kept with where it
came from. At the session's end a hit fails the run (the fixture's teardown error).

Records of the test's own HTTP client (`httpx`, `httpcore`: what the test sent, not
what the kit logged) are not the kit's and are not searched. A service a test starts as
a process logs to a file of that test's: `scan_file` searches one.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

MARKER_PREFIX = "cfsecret"  # a marker has no character any scrubber would cut it at
CLIENT_LOGGERS = ("httpx", "httpcore")


@dataclass
class Planted:
    markers: dict[str, str] = field(default_factory=dict)  # marker -> what it stands for
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str) -> str:
        marker = f"{MARKER_PREFIX}{uuid.uuid4().hex}"
        with self.lock:
            self.markers[marker] = what
        return marker

    def snapshot(self) -> dict[str, str]:
        with self.lock:
            return dict(self.markers)


PLANTED = Planted()


def plant(what: str) -> str:
    """A new secret value, watched for in every log record from now on."""
    return PLANTED.add(what)


def found_in(text: str, planted: Planted = PLANTED) -> list[str]:
    """What the planted markers that occur in `text` stood for."""
    if MARKER_PREFIX not in text:
        return []
    return [what for marker, what in planted.snapshot().items() if marker in text]


class LeakWatch(logging.Handler):
    """Searches every record for the planted markers; keeps the hits."""

    def __init__(self, planted: Planted = PLANTED) -> None:
        super().__init__(logging.DEBUG)
        self.planted = planted
        self.hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(CLIENT_LOGGERS):
            return
        try:
            text = record.getMessage()
        except Exception:  # a record whose args do not fit its format: search both
            text = f"{record.msg!r} {record.args!r}"
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        if record.stack_info:
            text += "\n" + record.stack_info
        for what in found_in(text, self.planted):
            self.hits.append(f"{what} in a record of {record.name}: {text[:300]!r}")


def scan_file(path: Path) -> list[str]:
    """The planted markers a service's log file holds (what each stood for)."""
    if not path.exists():
        return []
    return found_in(path.read_text(errors="replace"))
