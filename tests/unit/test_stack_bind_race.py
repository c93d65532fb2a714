"""A port found free can be taken before the server binds it; `up` starts again then.

CI lost a run this way: Kafka's listener failed with "Address already in use" on a
port `choose_port` had just found free (an outgoing connection's local port).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kit.stack.process import (
    BIND_ATTEMPTS,
    StackError,
    log_size,
    lost_bind_race,
    port_free,
    start_again_on_bind_race,
)


def test_a_port_found_free_is_lost_to_a_connection_made_before_the_bind() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    probe = socket.create_server(("127.0.0.1", 0))
    chosen = probe.getsockname()[1]
    probe.close()
    assert port_free(chosen)  # what `choose_port` sees ...
    client = socket.socket()  # ... then a client's connection is given that local port
    client.bind(("127.0.0.1", chosen))
    client.connect(listener.getsockname())
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        with pytest.raises(OSError, match="in use"):
            server.bind(("127.0.0.1", chosen))
            server.listen()
        assert not port_free(chosen)  # choosing again moves on (or waits the client out)
    finally:
        for sock in (server, client, listener):
            sock.close()


def test_only_what_this_start_logged_counts(tmp_path: Path) -> None:
    log = tmp_path / "kafka.log"
    log.write_text("an earlier start: java.net.BindException: Address already in use\n")
    since = log_size(log)
    with log.open("a") as f:
        f.write("ERROR storage directory is not formatted\n")
    assert not lost_bind_race(log, since)
    assert lost_bind_race(log, 0)
    with log.open("a") as f:
        f.write("Socket server failed to bind to 127.0.0.1:59092: Address already in use.\n")
    assert lost_bind_race(log, since)


def test_a_missing_log_is_no_race(tmp_path: Path) -> None:
    assert log_size(tmp_path / "none.log") == 0
    assert not lost_bind_race(tmp_path / "none.log", 0)


def test_a_start_that_lost_the_race_is_started_again_and_only_that(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("an earlier start: Address already in use\n")
    tries: list[int] = []

    def start(fail: tuple[str, ...]) -> None:
        tries.append(len(tries))
        if len(tries) <= len(fail):
            with log.open("a") as f:
                f.write(fail[len(tries) - 1] + "\n")
            raise StackError("server exited during start")

    start_again_on_bind_race("srv", log, lambda: start(("bind: Address already in use",)))
    assert len(tries) == 2  # lost once, started again
    tries.clear()
    with pytest.raises(StackError):  # another failure is not retried
        start_again_on_bind_race("srv", log, lambda: start(("data directory is corrupt",)))
    assert len(tries) == 1
    tries.clear()
    with pytest.raises(StackError):  # nor forever
        start_again_on_bind_race("srv", log, lambda: start(("Address already in use",) * 9))
    assert len(tries) == BIND_ATTEMPTS
