"""A small HTTP/1.1 client for the http task: kept-alive connections to one target per
pool, a request written in one piece, the response parsed by httptools (llhttp, the
parser of Node.js and uvicorn), only the status, Location and a bounded excerpt kept.

Why not aiohttp (what this replaced) or httpx: a webhook at a top-of-hour burst is a few
hundred bytes each way, and the client's own Python per request decided how late the last
one left. On this machine, 5,000 POSTs to a loopback target through one kept-alive pool
cost ~0.2 ms of CPU each with aiohttp, 6-7 ms with httpx's AsyncClient, and ~0.03 ms
with a protocol like this one (docs/http-tasks.md). The parts where a hand-written client
goes wrong are not written here: framing (content length, chunked, keep-alive, 1xx) is
llhttp's, TLS is the ssl module's with hostname checks, connecting is asyncio's.

What the pool guarantees the SSRF guard (kit.tasks.egress): a pool serves one target
(scheme, host name, the address the guard checked, port) and connects only to that
address; TLS is verified for the host name. Nothing else is followed: no redirect, no
proxy, no cookie. A response is read up to `excerpt` bytes of body; a connection whose
body was not read to its end, whose response said close, or that answered a HEAD is
closed, never reused; headers past `max_head` bytes abort the request.

An idle connection the server closed is seen (its EOF arrives on the loop) and never
reused; one that closes as the request goes out fails the request (`ConnectionLost`), which
the run's retry policy repeats: the request is not sent again here, since the target may
have acted on it (it carries the run's idempotency key for that case).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from dataclasses import dataclass

import httptools

from kit.tasks.context import Slot

IDLE_S = 4.0  # an idle connection is closed after this: below common servers' keep-alive
MAX_HEAD = 64 * 1024  # status line and headers of a response, at most


class ConnectionLost(ConnectionError):
    """The target closed the connection before the response was complete."""


class ProtocolError(Exception):
    """The response is not HTTP/1.1 this client can read."""


@dataclass(frozen=True)
class Response:
    status: int
    location: str | None
    excerpt: bytes  # at most `excerpt` bytes of the body
    cut: bool  # the body went on past the excerpt


class Connection(asyncio.Protocol):
    """One connection; one request at a time."""

    def __init__(self, excerpt: int, max_head: int) -> None:
        self.excerpt_max = excerpt
        self.max_head = max_head
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = time.monotonic()
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Response] | None = None
        self._reset(False)

    def _reset(self, head_only: bool) -> None:
        self._head_only = head_only
        self._status = 0
        self._location: str | None = None
        self._header_name = b""
        self._head_bytes = 0
        self._headers_done = False
        self._body = bytearray()
        self._cut = False
        self.reusable = False

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection is not reusable
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolError("the target asked to switch protocols"))
            return
        except httptools.HttpParserError as exc:
            if self._head_bytes > self.max_head:
                self._fail(ProtocolError(f"response headers over {self.max_head} bytes"))
            else:
                self._fail(ProtocolError(f"malformed response: {exc}"))
            return
        if not self._headers_done:  # bytes fed and the head still not over
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head:
                self._fail(ProtocolError(f"response headers over {self.max_head} bytes"))

    def eof_received(self) -> bool:
        self.closed = True
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._headers_done:
            # the status came: a body framed by the connection's end (no length), or cut
            # short, ends here; the target's answer is its status
            self._done(reusable=False)
        self._fail(ConnectionLost("the target closed the connection before it answered"))

    # -- httptools callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._waiter is None:  # a second response nobody asked for
            self.close()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > self.max_head:
            raise ProtocolError("headers too long")  # stops the parser (data_received)
        if name.lower() == b"location":
            self._location = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:
            return  # an informational response: the real one follows
        self._status = status
        self._headers_done = True
        if self._head_only:  # a HEAD has no body whatever its headers say
            self._done(reusable=False)

    def on_body(self, body: bytes) -> None:
        room = self.excerpt_max - len(self._body)
        if len(body) > room:
            self._body += body[:room]
            self._cut = True
            self._done(reusable=False)  # the rest is not read: the connection goes
        else:
            self._body += body

    def on_message_complete(self) -> None:
        if self._status == 0:
            return  # the end of an informational response
        self._done(reusable=self._parser.should_keep_alive())

    # -- the request ---------------------------------------------------------------------

    def _done(self, reusable: bool) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            self.reusable = reusable and not self.closed
            waiter.set_result(Response(self._status, self._location, bytes(self._body), self._cut))

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    async def exchange(self, request: bytes, head_only: bool) -> Response:
        assert self.transport is not None and self._waiter is None
        self._reset(head_only)
        self._parser = httptools.HttpResponseParser(self)
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            return await waiter
        finally:
            if self._waiter is waiter or not waiter.done() or not self.reusable:
                self._waiter = None
                self.close()  # cancelled, timed out or not reusable: never lent again


class TargetPool:
    """Kept-alive connections to one checked address, at most `limit` open at once.
    Requests beyond that wait their turn, first come first served: a freed connection is
    handed to the longest waiter (a newcomer never takes it first), so under a slow target
    no request waits longer than those before it."""

    def __init__(
        self,
        address: str,
        port: int,
        server_hostname: str | None,
        tls: ssl.SSLContext | None,
        limit: int,
        excerpt: int,
        max_head: int = MAX_HEAD,
    ) -> None:
        self.address, self.port = address, port
        self.server_hostname = server_hostname
        self.tls = tls
        self.limit = limit
        self.excerpt, self.max_head = excerpt, max_head
        self._idle: deque[Connection] = deque()
        self._open = 0  # connections open or being opened, idle ones included
        # a waiter is handed a connection, or None: room to open one of its own
        self._waiters: deque[asyncio.Future[Connection | None]] = deque()
        self.closed = False

    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def request(self, request: bytes, head_only: bool = False) -> Response:
        conn = await self.acquire()
        return await self.exchange(conn, request, head_only)

    async def exchange(self, conn: Connection, request: bytes, head_only: bool) -> Response:
        """One request on a connection from `acquire`, which goes back to the pool."""
        try:
            return await conn.exchange(request, head_only)
        finally:
            self.release(conn)

    async def acquire(
        self, connect_timeout_s: float | None = None, slot: Slot | None = None
    ) -> Connection:
        """A live connection: an idle one, a new one, or the next one freed (however long
        that takes); opening one gives up after `connect_timeout_s` (TimeoutError).

        `slot`, held by the caller, is given back while it waits for its turn (no work
        is done then: another run may use the place) and taken again once a connection
        or the room to open one is handed over, before connecting."""
        if not self._waiters:
            conn = self._idle_one()
            if conn is not None:
                return conn
            if self._open < self.limit:
                self._open += 1
                return await self._open_one(connect_timeout_s)
        waiter: asyncio.Future[Connection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if slot is not None:
            slot.give_back()
        try:
            handed = await waiter
            if slot is not None:
                await slot.take()
        except BaseException:
            if waiter.done() and not waiter.cancelled():  # handed something, then cancelled
                got = waiter.result()
                if got is None:
                    self._open -= 1
                    self._hand_on()
                else:
                    self.release(got)
            raise
        if handed is not None:
            return handed
        return await self._open_one(connect_timeout_s)  # a slot was handed: already counted

    def _idle_one(self) -> Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()  # the most recently used: the least likely stale
            if conn.closed or now - conn.idle_since > IDLE_S:
                conn.close()
                self._open -= 1
                continue
            return conn
        return None

    async def _open_one(self, timeout_s: float | None) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                _, conn = await loop.create_connection(
                    lambda: Connection(self.excerpt, self.max_head),
                    host=self.address,
                    port=self.port,
                    ssl=self.tls,
                    server_hostname=self.server_hostname if self.tls is not None else None,
                )
        except BaseException:
            self._open -= 1
            self._hand_on()
            raise
        return conn

    def release(self, conn: Connection) -> None:
        """A connection back: to the longest waiter, to the idle ones, or closed."""
        if conn.reusable and not conn.closed and not self.closed:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(conn)
                    return
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
            return
        conn.close()
        self._open -= 1
        self._hand_on()

    def _hand_on(self) -> None:
        """Room for one more connection: to the longest waiter, who opens it."""
        if self._open >= self.limit:
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._open += 1
                waiter.set_result(None)
                return

    def close(self) -> None:
        self.closed = True
        while self._idle:
            self._idle.pop().close()
            self._open -= 1
