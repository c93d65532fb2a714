"""The ledger's HTTP target: what an http task's run does to the world, recorded in the
same files and line format as chaos.ledger's command task (so the same auditor judges
both). A request to /effect with its run id as Idempotency-Key appends a `start` line;
the first for its key makes the effect (an `effect` line), any later one finds it made
(a `dedup` line): a target that honours the key, as the kit asks. Runs in the process
that runs the drill or soak; /ok answers and records nothing (traffic not audited).

A command task forks a shell per run (a few ms of CPU each); at hundreds of runs a
second the soak's bulk is http tasks to this target instead."""

from __future__ import annotations

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive: the kit's client pools connections
    server: LedgerServer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path.startswith("/effect"):
            key = self.headers.get("Idempotency-Key") or ""
            attempt = self.headers.get("X-Cronfleet-Attempt") or "0"
            if not key or not attempt.isdigit():
                self._answer(400)
                return
            self.server.record(key, int(attempt))
        self._answer(200)

    def _answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return  # thousands a second: nothing on stderr


class LedgerServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's listen backlog is 5: the soak's first fires open ~200 connections at
    # once (64 per worker), the kernel drops the SYNs past it and the clients send them
    # again after 1, 3, 7, 15 and 31 s, so a few runs "start" that late by the ledger
    request_queue_size = 1024

    def __init__(self, ledger: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self._lock = threading.Lock()
        self._done: set[str] = set()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._exec = os.open(ledger / "exec.log", flags, 0o666)
        self._effects = os.open(ledger / "effects.log", flags, 0o666)
        self._thread = threading.Thread(target=self.serve_forever, name="ledger", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> LedgerServer:
        self._thread.start()
        return self

    def record(self, key: str, attempt: int) -> None:
        """One execution of run `key`: its start, then its effect or its dedup."""
        pid = os.getpid()
        with self._lock:
            now = time.time_ns() // 1_000_000
            os.write(self._exec, f"start {key} {attempt} {now} {pid}\n".encode())
            if key in self._done:
                os.write(self._exec, f"dedup {key} {attempt} {now} {pid}\n".encode())
            else:
                self._done.add(key)
                os.write(self._effects, f"effect {key} {attempt} {now} {pid}\n".encode())

    def handle_error(self, request: object, client_address: object) -> None:
        """A worker killed or cut off mid-request resets its connection: the nemesis's
        doing, not the target's error, so no traceback on the soak's stderr."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        os.close(self._exec)
        os.close(self._effects)
