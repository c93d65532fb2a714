"""chaos.httpledger: the soak's HTTP target (chaos/ledgerd, built by
scripts/build_ledger.sh) records an effect once per key in chaos.ledger's line format,
refuses a request without its key, and a client that resets its connection mid-request
(a worker killed by the nemesis) costs no traceback on the soak's output."""

from __future__ import annotations

import socket
import struct
import subprocess
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
    lines = [line.split() for line in (tmp_path / "exec.log").read_text().splitlines()]
    assert [(e, k, a) for e, k, a, _, _ in lines] == [
        ("start", "run-1", "1"),
        ("start", "run-1", "2"),
        ("dedup", "run-1", "2"),
    ]
    assert all(abs(int(ms) / 1000 - time.time()) < 60 and pid.isdigit() for *_, ms, pid in lines)
    assert "Traceback" not in capsys.readouterr().err


def test_a_request_without_its_key_or_attempt_is_refused_and_recorded_nowhere(
    tmp_path: Path,
) -> None:
    server = LedgerServer(tmp_path).start()
    try:
        for headers in ({}, {"Idempotency-Key": "run-1"}, {"Idempotency-Key": "run-1",
                        "X-Cronfleet-Attempt": "one"}):  # fmt: skip
            assert httpx.post(f"{server.url}/effect", headers=headers).status_code == 400
        assert httpx.post(f"{server.url}/ok").status_code == 200
    finally:
        server.stop()
    assert (tmp_path / "exec.log").read_text() == ""
    assert (tmp_path / "effects.log").read_text() == ""
    assert server._proc is None


def test_the_target_listens_with_a_backlog_for_a_fleets_first_connections(
    tmp_path: Path,
) -> None:
    """A soak's first fires open ~200 connections at once; with socketserver's backlog of 5
    the kernel dropped the SYNs past it and a few runs reached the target 7-31 s late (the
    clients' SYN retransmits). The kernel's own view of the listening socket (`ss`: a
    listener's Send-Q is its backlog) must show room for them."""
    server = LedgerServer(tmp_path).start()
    try:
        port = server.server_address[1]
        shown = subprocess.run(
            ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
        ).stdout.split()
        assert shown[0] == "LISTEN"
        assert int(shown[2]) >= 1024
    finally:
        server.stop()
