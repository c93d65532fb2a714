"""Whatever path raises, the API's log carries no value a caller sent (issue 27, item 6).

PostgreSQL quotes the data it refuses: a JSON value with `\\u0000` comes back as
`CONTEXT: JSON data, line 1: {"Authorization": "Bearer ...`, an id it cannot read as
`invalid input syntax for type uuid: "..."`. `hide_parameters` hides SQLAlchemy's bound
values, not the server's text. Here a route of the test's own raises such an error
(standing for any path that does, in any module), and the API runs under uvicorn as
`cronfleet api` serves it, with the log configuration `cronfleet api` gives uvicorn, so
what is checked is what an operator's log would hold.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from logging.config import dictConfig

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy import Engine, text

from kit.api.app import create_app
from kit.api.safe_log import ScrubSecrets, uvicorn_log_config
from kit.settings import Settings
from tests.integration.leaks import plant

pytestmark = pytest.mark.integration

SECRET = plant("an Authorization header in a database error")  # the session watches it too
TEMPLATE = "/v1/test-only/{thing}/db-error"


class Records(logging.Handler):
    """Every record, formatted as the handler it replaces would write it (traceback
    included), after the handler's filters."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _app_with_a_failing_route(settings: Settings, engine: Engine) -> FastAPI:
    app = create_app(settings, engine)

    @app.get(TEMPLATE)
    def db_error(thing: str) -> None:
        """Sends PostgreSQL a JSON value it refuses, with a header in it."""
        value = '{"Authorization": "Bearer ' + SECRET + '", "x": "\\u0000"}'
        with engine.connect() as conn:
            conn.execute(text("SELECT CAST(:v AS jsonb)"), {"v": value})

    return app


@pytest.fixture
def served(settings: Settings, engine: Engine) -> Iterator[tuple[str, Records]]:
    """The app under uvicorn in a thread, logging through `cronfleet api`'s configuration
    with a capturing handler in place of each stream handler (filters kept)."""
    config = uvicorn_log_config("DEBUG")
    config["handlers"] = {
        name: {"()": Records, "filters": handler.get("filters", [])}
        for name, handler in config["handlers"].items()
    }
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    dictConfig(config)
    capture = Records()  # one list for every handler dictConfig made
    for name in ("", "uvicorn", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, Records):
                handler.lines = capture.lines
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            _app_with_a_failing_route(settings, engine),
            host="127.0.0.1",
            port=port,
            log_config=None,  # the configuration above stays in force
            access_log=True,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}", capture
    finally:
        server.should_exit = True
        thread.join(10)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        for name in ("uvicorn", "uvicorn.access"):
            logging.getLogger(name).handlers.clear()


def test_a_database_error_is_logged_as_its_kind_and_place_never_its_text(
    served: tuple[str, Records], make_token: object
) -> None:
    base, capture = served
    token = make_token("acme", ("read",))  # type: ignore[operator]
    response = httpx.get(
        f"{base}/v1/test-only/urn:uuid:f0d2a1b2-0000-4000-8000-000000000000/db-error",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 500
    assert SECRET not in response.text
    time.sleep(0.2)  # the server's log line of the request is written after the answer
    log = "\n".join(capture.lines)
    assert SECRET not in log, log
    assert response.json()["error"]["code"] == "internal"
    assert "CONTEXT" not in log and "Traceback" not in log, log
    assert token not in log
    # what it does say: the route's template, the error's kind and SQLSTATE
    [line] = [line for line in capture.lines if "answered 500" in line]
    assert TEMPLATE in line and "DataError" in line and "SQLSTATE 22P05" in line, line


def test_the_filter_scrubs_what_other_code_logs(served: tuple[str, Records]) -> None:
    """A record logged elsewhere with the same text, and a traceback attached, reaches
    the handler scrubbed (the filter is on every handler `cronfleet api` configures)."""
    _, capture = served
    try:
        raise ValueError(f'invalid input syntax for type uuid: "{SECRET}"')
    except ValueError:
        logging.getLogger("some.library").exception(
            'failed: CONTEXT:  JSON data, line 1: {"Authorization": "Bearer %s"}\n'
            "then https://user:%s@example.org/hook",
            SECRET,
            SECRET,
        )
    log = "\n".join(capture.lines)
    assert "some.library" in log
    assert SECRET not in log, log
    assert "ValueError" in log  # its kind is kept
    assert any(isinstance(f, ScrubSecrets) for h in logging.getLogger().handlers for f in h.filters)
