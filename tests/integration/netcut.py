"""A TCP forwarder on loopback that a test can cut: while cut, bytes in both directions
are read and dropped and new connections are held open unanswered, so the client's
calls hang as they would behind a dead link (no reset, no error), until healed or closed.

Or hold: while held, bytes wait unforwarded and flow on release, in order, as from a
database that stopped answering for a while (a stall: SIGSTOP, a long pause) and came
back with every connection intact.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttableLink:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._passing = threading.Event()
        self._passing.set()
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self._passing.clear()

    def heal(self) -> None:
        self._passing.set()

    def hold(self) -> None:
        """Stop forwarding without dropping anything (a stall), until release()."""
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        """Close every socket: hung clients now see their connections fail."""
        self._closed.set()
        with self._lock:
            for s in [self._server, *self._sockets]:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            if not self._passing.is_set():
                continue  # dropped on the floor: a dead link
            while not self._flowing.wait(0.05):  # held: it waits, whole and in order
                if self._closed.is_set():
                    return
            try:
                dst.sendall(data)
            except OSError:
                return
