"""What a client is told when the database refuses: a 503 it retries, which says why. A
full disk (SQLSTATE 53100) used to read "the database is unavailable" although it answered
and only writes were refused; now the code is `database_full` and the message says so."""

from __future__ import annotations

import json

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from kit.api import errors


def app_raising(exc: Exception) -> FastAPI:
    app = FastAPI()
    errors.install(app)

    @app.post("/v1/jobs")
    def create() -> None:
        raise exc

    return app


def wrapped(orig: Exception) -> OperationalError:
    return OperationalError("INSERT INTO jobs ...", {}, orig)


@pytest.mark.parametrize(
    ("exc", "code", "words", "retry_after"),
    [
        (
            wrapped(psycopg.errors.DiskFull('could not extend file "base/1/2": No space left')),
            "database_full",
            "out of disk space",
            "5",
        ),
        (psycopg.errors.DiskFull("could not extend file"), "database_full", "refuses writes", "5"),
        (
            wrapped(psycopg.errors.TooManyConnections("too many")),
            "database_busy",
            "connection",
            "1",
        ),
        (
            wrapped(psycopg.OperationalError("connection refused")),
            "unavailable",
            "unavailable",
            "1",
        ),
    ],
)
def test_a_database_refusal_is_a_503_that_says_why(
    exc: Exception, code: str, words: str, retry_after: str
) -> None:
    with TestClient(app_raising(exc), raise_server_exceptions=False) as client:
        answer = client.post("/v1/jobs", json={})
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == retry_after
    error = answer.json()["error"]
    assert error["code"] == code and words in error["message"], json.dumps(error)
