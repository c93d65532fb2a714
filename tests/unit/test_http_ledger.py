"""chaos.httpledger: the soak's HTTP target records an effect once per key, and a client
that resets its connection mid-request (a worker killed by the nemesis) costs no
traceback on the soak's output."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import httpx
import pytest

from chaos.httpledger import LedgerServer


def test_an_effect_is_made_once_per_key_and_a_reset_client_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = LedgerServer(tmp_path).start()
    try:
        for attempt in ("1", "2"):
            answer = httpx.post(
                f"{server.url}/effect",
                headers={"Idempotency-Key": "run-1", "X-Cronfleet-Attempt": attempt},
            )
            assert answer.status_code == 200
        host, port = server.server_address[:2]
        with socket.create_connection((str(host), int(port))) as sock:
            sock.sendall(b"POST /effect HTTP/1.1\r\nHost: x\r\n")  # and no more
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        time.sleep(0.3)
    finally:
        server.stop()
    effects = (tmp_path / "effects.log").read_text().splitlines()
    assert len(effects) == 1 and "run-1" in effects[0]
    assert "Traceback" not in capsys.readouterr().err
