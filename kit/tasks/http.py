"""The http task: one request, the run id as Idempotency-Key, no redirects.

A worker runs every http task of its process on one event loop (kit.worker.task_loop),
with connections kept alive per target: at a top-of-hour burst of webhooks the cost of
a request is what decides how late the last one leaves. aiohttp rather than httpx: on
this machine, 5,000 POSTs to a loopback target through one kept-alive pool cost ~0.2 ms
of CPU each with aiohttp and 6-7 ms with httpx's AsyncClient (its pool slows with many
requests waiting in it); a thread per request with httpx, as before, cost ~3.7 ms.

What a request may reach is decided before it is sent, for every request: the host is
resolved once, every address checked by the SSRF guard (kit.tasks.egress, the tenant's
allow-list), and the connection made to the address that was checked, with TLS verified
for the URL's real name. Kept-alive connections are pooled per target (scheme, name,
checked address, port), never across: a connection opened and verified for one name or
address is never lent to a request for another, and a request whose check refuses the
address never reaches a pool. No cookie is kept, no proxy from the environment is used,
a redirect is not followed (a 3xx is a failure naming its status and Location), and only
a bounded excerpt of the response body is read (a connection with a body left unread is
closed, not reused).

The run's timeout bounds the whole request (lookup, waiting for a connection, sending,
reading); the worker's cancel stops it at once. A failed response's status and the start
of its body go into the run's error, scrubbed of the job's secret values
(kit.core.redaction): a target that echoes its request back does not publish the
Authorization header.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import cache, lru_cache
from typing import Any, Literal, get_args

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from pydantic import Field, field_validator, model_validator
from yarl import URL

from kit.core.redaction import ALWAYS_SECRET_HEADERS, MASK, scrub, scrub_excerpt
from kit.tasks.context import Cancel, RunContext, TaskResult
from kit.tasks.egress import AllowList, EgressRefused, IPAddress, checked_address_async
from kit.tasks.spec import TaskSpec, TaskType, names_present, no_mask

EXCERPT_BYTES = 2048
ERROR_EXCERPT_CHARS = 512  # of a failed response's body, in the run's error
CONNECTIONS_PER_TARGET = 64  # kept alive (and open at once) per target, per worker
TARGETS_KEPT = 256  # targets whose connections a worker keeps; the least used go first
USER_AGENT = "cronfleet-worker"
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
METHODS = frozenset(get_args(Method))
_OWN_HEADERS = (
    "host",
    "accept-encoding",
    "idempotency-key",
    "x-cronfleet-run-id",
    "x-cronfleet-attempt",
)
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # a header name (RFC 9110)
_NO_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=None, sock_read=None, sock_connect=None)
_CANCEL_POLL_S = 0.05  # a plain threading.Event (not a Cancel) is looked at this often


class HttpTask(TaskSpec):
    type: Literal["http"]
    url: str = Field(min_length=1, max_length=4096)
    method: Method
    headers: dict[str, str] = Field(default_factory=dict)
    secret_headers: list[str] = Field(
        default_factory=list,
        description=(
            "Headers whose values are secret: never returned by the API (shown as "
            f"{MASK!r}), never logged, scrubbed from run errors. "
            f"{' and '.join(sorted(ALWAYS_SECRET_HEADERS))} always are."
        ),
    )
    body: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        scheme, sep, rest = value.partition("://")
        if not sep or scheme.lower() not in ("http", "https") or not rest.split("/")[0]:
            raise ValueError("must be an absolute http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _secrets(self) -> HttpTask:
        names_present(self.secret_headers, self.headers, "headers", fold=True)
        no_mask(self.headers, "headers")
        return self


@cache
def _tls() -> ssl.SSLContext:
    """Verification with the system's CA bundle and hostname checks, built once per
    process (building one loads the bundle: 31 ms of CPU); shared by every connection.
    No SSL_CERT_FILE from the environment."""
    return ssl.create_default_context()


class _Request:
    """A spec turned into what is sent, before anything is resolved or connected."""

    def __init__(self, spec: Mapping[str, Any], ctx: RunContext) -> None:
        method = str(spec.get("method", "GET")).upper()
        if method not in METHODS:
            raise ValueError(f"task.method: must be one of {', '.join(sorted(METHODS))}")
        url, host, port = _target(str(spec.get("url", "")))
        headers = {
            str(k): str(v)
            for k, v in dict(spec.get("headers") or {}).items()
            if str(k).lower() not in _OWN_HEADERS
        }
        for name, value in headers.items():
            if not _TOKEN.match(name) or not value.isascii() or any(c in value for c in "\r\n\0"):
                raise ValueError(
                    "task.headers: names and values must be ASCII, names tokens, values "
                    "without line breaks"
                )
        headers.setdefault("User-Agent", USER_AGENT)
        headers["Accept-Encoding"] = "identity"  # the excerpt is raw bytes: no decompression
        headers["Idempotency-Key"] = ctx.run_id
        headers["X-Cronfleet-Run-Id"] = ctx.run_id
        headers["X-Cronfleet-Attempt"] = str(ctx.attempt)
        body = spec.get("body")
        self.method = method
        self.url = url
        self.host = host
        self.port = port
        self.headers = headers
        self.body = body.encode() if isinstance(body, str) else None


@lru_cache(maxsize=4096)
def _target(text: str) -> tuple[URL, str, int]:
    """A job's URL parsed once per worker (a job fires again and again): URL, the host
    as resolved and checked (IDNA-encoded), port."""
    try:
        url = URL(text)
        host = url.raw_host
    except (ValueError, UnicodeError) as exc:
        raise ValueError(f"task.url: not a URL ({exc})") from None
    if url.scheme not in ("http", "https") or not host or not url.is_absolute():
        raise ValueError("task.url: must be an absolute http:// or https:// URL")
    return url, host, url.port or (443 if url.scheme == "https" else 80)


class _Pinned(AbstractResolver):
    """A resolver that knows one name: the address the SSRF guard checked for it."""

    def __init__(self, host: str, address: IPAddress) -> None:
        self.host = host
        self.address = address

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host != self.host:  # never asked: a pool serves one target
            raise OSError(f"{host} is not this pool's target")
        fam = socket.AF_INET6 if self.address.version == 6 else socket.AF_INET
        return [
            ResolveResult(
                hostname=host,
                host=str(self.address),
                port=port,
                family=fam,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        pass


class HttpTargets:
    """Kept-alive connections of one event loop, a pool per target (scheme, host name,
    checked address, port), the least recently used closed past `kept` targets."""

    def __init__(self, per_target: int = CONNECTIONS_PER_TARGET, kept: int = TARGETS_KEPT) -> None:
        self.per_target = per_target
        self.kept = kept
        self._sessions: OrderedDict[tuple[str, str, str, int], aiohttp.ClientSession] = (
            OrderedDict()
        )

    def session(
        self, scheme: str, host: str, address: IPAddress, port: int
    ) -> aiohttp.ClientSession:
        key = (scheme, host, str(address), port)
        session = self._sessions.get(key)
        if session is not None and not session.closed:
            self._sessions.move_to_end(key)
            return session
        connector = aiohttp.TCPConnector(
            limit=self.per_target,
            ssl=_tls() if scheme == "https" else False,
            resolver=_Pinned(host, address),
            use_dns_cache=False,
            enable_cleanup_closed=scheme == "https",
        )
        session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),  # no cookie carried between requests
            auto_decompress=False,
            trust_env=False,  # no proxy from the environment around the guard
            timeout=_NO_TIMEOUT,  # the run's own timeout bounds the whole request
            skip_auto_headers=("User-Agent",),
        )
        self._sessions[key] = session
        while len(self._sessions) > self.kept:
            _, old = self._sessions.popitem(last=False)
            asyncio.get_running_loop().create_task(old.close())
        return session

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        for session in sessions:
            await session.close()


_loop_targets: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, HttpTargets] = (
    weakref.WeakKeyDictionary()
)


def targets_of(loop: asyncio.AbstractEventLoop) -> HttpTargets:
    """The loop's pools (made on first use; a loop's owner closes them with it)."""
    targets = _loop_targets.get(loop)
    if targets is None:
        targets = _loop_targets[loop] = HttpTargets()
    return targets


def run_http(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    """One request with a loop of its own (callers without one: tests, one-off runs)."""

    async def once() -> TaskResult:
        loop = asyncio.get_running_loop()
        try:
            return await run_http_async(spec, ctx)
        finally:
            await targets_of(loop).close()

    return asyncio.run(once())


async def run_http_async(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    """One request on the running loop, through its kept-alive pools."""
    result = await _run_http(spec, ctx)
    return TaskResult(
        result.ok,
        None if result.error is None else scrub(result.error, ctx.secrets),
        None if result.detail is None else scrub(result.detail, ctx.secrets),
    )


async def _run_http(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    try:
        request = _Request(spec, ctx)
    except ValueError as exc:
        return TaskResult(False, str(exc))
    if ctx.cancel.is_set():
        return TaskResult(False, "cancelled")
    task = asyncio.current_task()
    assert task is not None
    stop_watching = _watch(ctx.cancel, task)
    try:
        async with asyncio.timeout(ctx.timeout_s):
            address = await checked_address_async(
                request.host, request.port, AllowList.parse(ctx.allow_hosts)
            )
            session = targets_of(asyncio.get_running_loop()).session(
                request.url.scheme, request.host, address, request.port
            )
            return await _send(session, request, ctx.secrets)
    except EgressRefused as exc:
        return TaskResult(False, str(exc))
    except TimeoutError:
        return TaskResult(False, f"timed out after {ctx.timeout_s:g} s")
    except asyncio.CancelledError:
        if not ctx.cancel.is_set():
            raise  # the loop is stopping: not this task's outcome
        task.uncancel()
        return TaskResult(False, "cancelled")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return TaskResult(False, f"request failed: {_kind(exc)}: {exc}")
    finally:
        stop_watching()


def _watch(cancel: Any, task: asyncio.Task[Any]) -> Callable[[], None]:
    """Cancel `task` when the run's flag is set: at once through a `Cancel`'s callback,
    or by looking at a plain threading.Event every 50 ms."""
    loop = task.get_loop()
    if isinstance(cancel, Cancel):

        def stop() -> None:
            loop.call_soon_threadsafe(task.cancel)

        return cancel.on_set(stop)
    assert isinstance(cancel, threading.Event)

    async def poll() -> None:
        while not cancel.is_set():
            await asyncio.sleep(_CANCEL_POLL_S)
        task.cancel()

    poller = loop.create_task(poll())

    def forget() -> None:
        poller.cancel()

    return forget


def _kind(exc: BaseException) -> str:
    """A stable name for what failed (the run's error is read by tenants and tests)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
        return "TLSError"
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionError):
        return "ConnectError"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "RemoteProtocolError"
    return type(exc).__name__


async def _send(
    session: aiohttp.ClientSession, request: _Request, secrets: tuple[str, ...]
) -> TaskResult:
    async with session.request(
        request.method,
        request.url,
        headers=request.headers,
        data=request.body,
        allow_redirects=False,
    ) as response:
        excerpt = bytearray()
        while len(excerpt) <= EXCERPT_BYTES:
            chunk = await response.content.read(EXCERPT_BYTES + 1 - len(excerpt))
            if not chunk:
                break
            excerpt += chunk
        status = response.status
        location = response.headers.get("Location", "?")
    cut = len(excerpt) > EXCERPT_BYTES
    text = bytes(excerpt[:EXCERPT_BYTES]).decode("utf-8", errors="replace")
    text = scrub_excerpt(text, secrets, cut_head=False, cut_tail=cut)
    detail = f"HTTP {status}; body: {text}" if text else f"HTTP {status}"
    if 200 <= status < 300:
        return TaskResult(True, None, detail)
    if 300 <= status < 400:
        return TaskResult(False, f"HTTP {status} redirect to {location} (not followed)", detail)
    if not text.strip():
        return TaskResult(False, f"HTTP {status}", detail)
    short = text.strip()
    if len(short) > ERROR_EXCERPT_CHARS:
        short = scrub_excerpt(short[:ERROR_EXCERPT_CHARS], secrets, cut_head=False, cut_tail=True)
    return TaskResult(False, f"HTTP {status}; body: {short}", detail)


TASK = TaskType("http", HttpTask, run_http, run_async=run_http_async)
