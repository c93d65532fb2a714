"""The http task: one request, the run id as Idempotency-Key, no redirects.

A worker runs every http task of its process on one event loop (kit.worker.task_loop),
with connections kept alive per target (kit.tasks.http_client): at a top-of-hour burst of
webhooks the cost of a request is what decides how late the last one leaves.

What a request may reach is decided before it is sent, for every request: the host is
resolved once, every address checked by the SSRF guard (kit.tasks.egress, the tenant's
allow-list), and the connection made to the address that was checked, with TLS verified
for the URL's real name. Kept-alive connections are pooled per target (scheme, name,
checked address, port), never across: a connection opened and verified for one name or
address is never lent to a request for another, and a request whose check refuses the
address never reaches a pool. No cookie is kept, no proxy from the environment is used,
a redirect is not followed (a 3xx is a failure naming its status and Location), and only
a bounded excerpt of the response body is read (a connection with a body left unread is
closed, not reused). Header names and values are checked (ASCII, no line breaks) so a
job cannot inject a header or a second request.

The run's timeout bounds the whole request (lookup, waiting for a connection, sending,
reading); the worker's cancel stops it at once. A failed response's status and the start
of its body go into the run's error, scrubbed of the job's secret values
(kit.core.redaction): a target that echoes its request back does not publish the
Authorization header.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator
from yarl import URL

from kit.core.output import OUTPUT_CAP_BYTES, Output, excerpt
from kit.core.redaction import (
    ALWAYS_SECRET_HEADERS,
    MASK,
    basic_credential,
    is_masked_url,
    scrub,
    scrub_excerpt,
    url_userinfo,
)
from kit.tasks.context import Cancel, CancelFlag, RunContext, TaskResult
from kit.tasks.egress import AllowList, EgressRefused, IPAddress, checked_address_async
from kit.tasks.http_client import (
    Connection,
    ConnectionLost,
    ProtocolError,
    Response,
    TargetPool,
)
from kit.tasks.spec import TaskSpec, TaskType, names_present, no_mask

EXCERPT_BYTES = 2048
ERROR_EXCERPT_CHARS = 512  # of a failed response's body, in the run's error
CONNECTIONS_PER_TARGET = 64  # kept alive (and open at once) per target, per worker
TARGETS_KEPT = 256  # targets whose connections a worker keeps; the least used go first
USER_AGENT = "cronfleet-worker"
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
METHODS = frozenset(get_args(Method))
_OWN_HEADERS = frozenset(
    (
        "host",
        "accept-encoding",
        "idempotency-key",
        "x-cronfleet-run-id",
        "x-cronfleet-attempt",
        # the message's framing and the connection are the client's
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
    )
)
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # a header name (RFC 9110)
_CANCEL_POLL_S = 0.05  # a plain threading.Event (not a Cancel) is looked at this often
# What an async task answers when the worker refused its start (a lease it could not
# confirm, a stop): nothing was sent, and the worker gives the run back itself.
NOT_STARTED = TaskResult(
    False, "not started"
)  # a plain threading.Event (not a Cancel) is looked at this often


def checked_url(value: str) -> str:
    """An http task's or a webhook's URL: absolute http(s), credentials not the mask."""
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.split("/")[0]:
        raise ValueError("must be an absolute http:// or https:// URL")
    if is_masked_url(value):  # write-only, as a secret header's value (spec.no_mask)
        raise ValueError(
            f"has {MASK!r} as its credentials, how the API shows them; send the "
            "credentials themselves"
        )
    return value


URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/\u0000][^\u0000]*$"


class HttpTask(TaskSpec):
    type: Literal["http"]
    url: str = Field(
        min_length=1,
        max_length=4096,
        description=(
            "Credentials in it (`https://user:pass@host/`) are sent as `Authorization: "
            f"Basic` and are secret like that header: shown as `https://{MASK}@host/`."
        ),
        # what `_url` checks, declared (the API's document; `_url` words the refusal)
        json_schema_extra={"pattern": URL_PATTERN},
    )
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
        return checked_url(value)

    @model_validator(mode="after")
    def _secrets(self) -> HttpTask:
        names_present(self.secret_headers, self.headers, "headers", fold=True)
        no_mask(self.headers, "headers")
        return self


class Webhook(TaskSpec):
    """Where a job's failure notifications go (kit.core.notify): a POST of JSON to `url`
    with `headers`, through the same egress guard and allow-list as an http task's
    request; its secret headers (and URL credentials) are write-only as an http task's."""

    url: str = Field(
        min_length=1,
        max_length=4096,
        description=HttpTask.model_fields["url"].description,
        json_schema_extra={"pattern": URL_PATTERN},
    )
    headers: dict[str, str] = Field(default_factory=dict)
    secret_headers: list[str] = Field(
        default_factory=list,
        description=HttpTask.model_fields["secret_headers"].description,
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return checked_url(value)

    @model_validator(mode="after")
    def _secrets(self) -> Webhook:
        names_present(self.secret_headers, self.headers, "headers", fold=True)
        no_mask(self.headers, "headers")
        return self


def webhook_task(webhook: Mapping[str, Any], body: str) -> dict[str, Any]:
    """A webhook as the http task that delivers it (its secrets are then the task's:
    kit.core.redaction)."""
    headers = dict(webhook.get("headers") or {})
    headers.setdefault("Content-Type", "application/json")
    return {
        "type": "http",
        "url": webhook["url"],
        "method": "POST",
        "headers": headers,
        "secret_headers": list(webhook.get("secret_headers") or ()),
        "body": body,
    }


@cache
def _tls() -> ssl.SSLContext:
    """Verification with the system's CA bundle and hostname checks, built once per
    process (building one loads the bundle: 31 ms of CPU); shared by every connection.
    No SSL_CERT_FILE from the environment."""
    return ssl.create_default_context()


class _Request:
    """A spec turned into the bytes that are sent, before anything is resolved or
    connected; ValueError names the field at fault."""

    def __init__(self, spec: Mapping[str, Any], ctx: RunContext) -> None:
        headers = spec.get("headers") or {}
        body = spec.get("body")
        prepared = _prepared(
            str(spec.get("method", "GET")).upper(),
            str(spec.get("url", "")),
            tuple((str(k), str(v)) for k, v in dict(headers).items()),
            body if isinstance(body, str) else None,
        )
        run_id = ctx.run_id
        own = (
            f"Idempotency-Key: {run_id}\r\nX-Cronfleet-Run-Id: {run_id}\r\n"
            f"X-Cronfleet-Attempt: {ctx.attempt}\r\n\r\n"
        )
        self.bytes = prepared.head + own.encode("latin-1") + prepared.payload
        self.method, self.scheme = prepared.method, prepared.scheme
        self.host, self.port = prepared.host, prepared.port


@dataclass(frozen=True)
class _Prepared:
    method: str
    scheme: str
    host: str
    port: int
    head: bytes  # the request line and every header but the run's own
    payload: bytes


@lru_cache(maxsize=4096)
def _prepared(
    method: str, url_text: str, headers: tuple[tuple[str, str], ...], body: str | None
) -> _Prepared:
    """What a job's request is whatever the run (a job fires again and again): built and
    checked once per worker."""
    if method not in METHODS:
        raise ValueError(f"task.method: must be one of {', '.join(sorted(METHODS))}")
    url, host, port = _target(url_text)
    for name, value in headers:
        if not _TOKEN.match(name) or not value.isascii() or any(c in value for c in "\r\n\0"):
            raise ValueError(
                "task.headers: names and values must be ASCII, names tokens, values "
                "without line breaks"
            )
    # the job's headers, less those the kit sets and those that frame the message (a
    # job's Transfer-Encoding beside our Content-Length would let it smuggle a request)
    mine = [(k, v) for k, v in headers if k.lower() not in _OWN_HEADERS]
    folded = {k.lower() for k, _ in mine}
    payload = body.encode() if body is not None else b""
    lines = [
        f"{method} {url.raw_path_qs or '/'} HTTP/1.1",
        f"Host: {url.host_port_subcomponent}",
    ]
    userinfo = url_userinfo(url_text)  # the credential kit.core.redaction scrubs
    if userinfo and "authorization" not in folded:
        lines.append(f"Authorization: Basic {basic_credential(userinfo)}")
    if "user-agent" not in folded:
        lines.append(f"User-Agent: {USER_AGENT}")
    lines += [f"{k}: {v}" for k, v in mine]
    lines.append("Accept-Encoding: identity")  # the excerpt is raw bytes: no decompression
    if payload or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(payload)}")
    head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
    return _Prepared(method, url.scheme, host, port, head, payload)


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


class HttpTargets:
    """Kept-alive connections of one event loop, a pool per target (scheme, host name,
    checked address, port), the least recently used closed past `kept` targets."""

    def __init__(self, per_target: int | None = None, kept: int = TARGETS_KEPT) -> None:
        self.per_target = per_target or CONNECTIONS_PER_TARGET
        self.kept = kept
        self._pools: OrderedDict[tuple[str, str, str, int], TargetPool] = OrderedDict()

    def pool(self, scheme: str, host: str, address: IPAddress, port: int) -> TargetPool:
        key = (scheme, host, str(address), port)
        pool = self._pools.get(key)
        if pool is not None:
            self._pools.move_to_end(key)
            return pool
        pool = self._pools[key] = TargetPool(
            str(address),
            port,
            server_hostname=host,
            tls=_tls() if scheme == "https" else None,
            limit=self.per_target,
            excerpt=EXCERPT_BYTES + 1,  # one byte more says the body went on
        )
        while len(self._pools) > self.kept:
            _, old = self._pools.popitem(last=False)
            old.close()  # idle connections go; requests in flight finish on theirs
        return pool

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            pool.close()


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
        result.output,  # scrubbed where it was cut (_result)
    )


async def _run_http(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    """The run's place first (`ctx.slot`: the worker's bound on runs doing network work
    at once), then the lookup, the guard and a connection (the kit's own wait: its turn
    for a connection is not the run's to pay for, and the place is given back while it
    waits for it; the lookup and opening a connection are each bounded by the run's
    timeout), then the run begins (`ctx.begin`: the worker marks its start, or refuses
    it), then the request, bounded by the run's timeout. A run never
    spends its timeout queueing for a connection and then times out with its request at
    the target (that ran 127 of 20,000 runs twice against a slow target), nor fails for
    having waited its turn (bounding the turn by the timeout failed 12,448 of them)."""
    began = False

    async def begin() -> bool:
        nonlocal began
        began = ctx.begin is None or await ctx.begin()
        return began

    async def failed(error: str) -> TaskResult:
        if not began and not await begin():
            return NOT_STARTED
        return TaskResult(False, error)

    try:
        request = _Request(spec, ctx)
    except ValueError as exc:
        return await failed(str(exc))
    if ctx.cancel.is_set():
        return TaskResult(False, "cancelled")
    task = asyncio.current_task()
    assert task is not None
    stop_watching = _watch(ctx.cancel, task)
    pool: TargetPool | None = None
    unsent: Connection | None = None
    try:
        if ctx.slot is not None:  # no lookup, no connection before the run holds a place
            await ctx.slot.take()
        try:
            async with asyncio.timeout(ctx.timeout_s):
                address = await checked_address_async(
                    request.host, request.port, AllowList.parse(ctx.allow_hosts)
                )
        except TimeoutError:
            return await failed(f"looking up {request.host} took over {ctx.timeout_s:g} s")
        pool = targets_of(asyncio.get_running_loop()).pool(
            request.scheme, request.host, address, request.port
        )
        try:
            # its turn for a connection is not bounded here (the requests before it are,
            # each by its own timeout); opening one is, by the run's timeout
            unsent = await pool.acquire(connect_timeout_s=ctx.timeout_s, slot=ctx.slot)
        except TimeoutError:
            where = f"{request.host}:{request.port}"
            return await failed(f"could not connect to {where} within {ctx.timeout_s:g} s")
        if not await begin():
            return NOT_STARTED
        conn, unsent = unsent, None
        async with asyncio.timeout(ctx.timeout_s):
            response = await pool.exchange(conn, request.bytes, request.method == "HEAD")
        return _result(response, ctx.secrets)
    except EgressRefused as exc:
        return await failed(str(exc))
    except TimeoutError:
        return TaskResult(False, f"timed out after {ctx.timeout_s:g} s")
    except asyncio.CancelledError:
        if not ctx.cancel.is_set():
            raise  # the loop is stopping: not this task's outcome
        task.uncancel()
        return TaskResult(False, "cancelled")
    except (ConnectionLost, ProtocolError, OSError) as exc:
        return await failed(f"request failed: {_kind(exc)}: {exc}")
    finally:
        if unsent is not None and pool is not None:
            pool.release(unsent)
        stop_watching()


def _watch(cancel: CancelFlag, task: asyncio.Task[Any]) -> Callable[[], None]:
    """Cancel `task` when the run's flag is set: at once through a `Cancel`'s callback,
    or by looking at another flag (a threading.Event) every 50 ms."""
    loop = task.get_loop()
    if isinstance(cancel, Cancel):

        def stop() -> None:
            loop.call_soon_threadsafe(task.cancel)

        return cancel.on_set(stop)

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
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return "TLSError"
    if isinstance(exc, ConnectionLost):
        return "RemoteProtocolError"
    if isinstance(exc, ProtocolError):
        return "ProtocolError"
    return "ConnectError"


def _result(response: Response, secrets: tuple[str, ...]) -> TaskResult:
    body, status, location = response.excerpt, response.status, response.location or "?"
    cut = len(body) > EXCERPT_BYTES
    raw = bytes(body[:EXCERPT_BYTES]).decode("utf-8", errors="replace")
    text = scrub_excerpt(raw, secrets, cut_head=False, cut_tail=cut)
    detail = f"HTTP {status}; body: {text}" if text else f"HTTP {status}"
    # the run page's output: the status line and the start of the body (kit.core.output)
    kept = excerpt(f"HTTP {status}\n{raw}", secrets, OUTPUT_CAP_BYTES, keep="head", cut=cut)
    output = Output(kept)
    if 200 <= status < 300:
        return TaskResult(True, None, detail, output)
    if 300 <= status < 400:
        error = f"HTTP {status} redirect to {location} (not followed)"
        return TaskResult(False, error, detail, output)
    if not text.strip():
        return TaskResult(False, f"HTTP {status}", detail, output)
    short = text.strip()
    if len(short) > ERROR_EXCERPT_CHARS:
        short = scrub_excerpt(short[:ERROR_EXCERPT_CHARS], secrets, cut_head=False, cut_tail=True)
    return TaskResult(False, f"HTTP {status}; body: {short}", detail, output)


TASK = TaskType("http", HttpTask, run_http, run_async=run_http_async)
