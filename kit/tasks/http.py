"""The http task: one request, the run id as Idempotency-Key, no redirects.

httpx (already a dependency) rather than the stdlib: it can be told to connect to a
given IP while verifying TLS for the real name (the `sni_hostname` extension), so the
address the SSRF guard checked is the one connected to, with no second DNS lookup;
`trust_env=False` keeps an environment proxy from bypassing that guard. A redirect is
not followed (it could point anywhere, the guard included): a 3xx is a failure that
names its status and Location. Only a bounded excerpt of the response body is read.

The request runs on a helper thread so the run's timeout and the worker's cancel
stop it promptly: closing the client aborts a request blocked in a read. Its client is
new per request but the TLS context is the process's one (`_tls`): building a context
loads the CA bundle, 31 ms of CPU, which was nearly all an http run cost the worker.

A failed response's status and the start of its body go into the run's error (what a
tenant debugs a webhook with), scrubbed of the job's secret values
(kit.core.redaction): a target that echoes its request back does not publish the
Authorization header.
"""

from __future__ import annotations

import ipaddress
import ssl
import threading
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal, get_args

import httpx
from pydantic import Field, field_validator, model_validator

from kit.core.redaction import ALWAYS_SECRET_HEADERS, MASK, scrub, scrub_excerpt
from kit.tasks.context import Deadline, RunContext, TaskResult, stopped
from kit.tasks.egress import AllowList, EgressRefused, checked_address
from kit.tasks.spec import TaskSpec, TaskType, names_present, no_mask

EXCERPT_BYTES = 2048
ERROR_EXCERPT_CHARS = 512  # of a failed response's body, in the run's error
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
METHODS = frozenset(get_args(Method))
_OWN_HEADERS = (
    "host",
    "accept-encoding",
    "idempotency-key",
    "x-cronfleet-run-id",
    "x-cronfleet-attempt",
)


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
    """httpx's default verification (its CA bundle, hostname checks), built once: an
    SSLContext is safe to share between threads, each connection wraps its own socket.
    `trust_env=False`: no SSL_CERT_FILE from the environment, as for the client."""
    return httpx.create_ssl_context(trust_env=False)


def run_http(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    result = _run_http(spec, ctx)
    return TaskResult(
        result.ok,
        None if result.error is None else scrub(result.error, ctx.secrets),
        None if result.detail is None else scrub(result.detail, ctx.secrets),
    )


def _run_http(spec: Mapping[str, Any], ctx: RunContext) -> TaskResult:
    deadline = Deadline(ctx.timeout_s)
    try:
        request = _request(spec, ctx)
    except UnicodeEncodeError as exc:
        return TaskResult(False, f"task.headers: names and values must be ASCII ({exc.reason})")
    except (ValueError, EgressRefused, httpx.InvalidURL) as exc:
        return TaskResult(False, str(exc))
    outcome: list[TaskResult] = []
    client = httpx.Client(
        verify=_tls(),
        follow_redirects=False,
        trust_env=False,
        timeout=httpx.Timeout(max(0.001, deadline.remaining_s())),
    )

    def send() -> None:
        try:
            outcome.append(_send(client, request, ctx.secrets))
        except httpx.TimeoutException:
            outcome.append(TaskResult(False, f"timed out after {deadline.timeout_s:g} s"))
        except (httpx.HTTPError, OSError, RuntimeError) as exc:
            outcome.append(TaskResult(False, f"request failed: {type(exc).__name__}: {exc}"))

    worker = threading.Thread(target=send, name=f"http-{ctx.run_id}", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
        if worker.is_alive() and (failure := stopped(ctx, deadline)):
            client.close()  # aborts the blocked read; the thread then ends on its own
            return failure
    client.close()
    return outcome[0]


def _request(spec: Mapping[str, Any], ctx: RunContext) -> httpx.Request:
    method = str(spec.get("method", "GET")).upper()
    if method not in METHODS:
        raise ValueError(f"task.method: must be one of {', '.join(sorted(METHODS))}")
    url = httpx.URL(str(spec.get("url", "")))
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("task.url: must be an absolute http:// or https:// URL")
    port = url.port or (443 if url.scheme == "https" else 80)
    address = checked_address(url.host, port, AllowList.parse(ctx.allow_hosts))
    ip_host = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    headers = {
        k: v for k, v in dict(spec.get("headers") or {}).items() if k.lower() not in _OWN_HEADERS
    }
    headers["Host"] = url.netloc.decode("ascii")
    headers["Accept-Encoding"] = "identity"  # the excerpt is raw bytes: no decompression
    headers["Idempotency-Key"] = ctx.run_id
    headers["X-Cronfleet-Run-Id"] = ctx.run_id
    headers["X-Cronfleet-Attempt"] = str(ctx.attempt)
    body = spec.get("body")
    return httpx.Request(
        method,
        url.copy_with(host=ip_host.strip("[]")),
        headers=headers,
        content=body.encode() if isinstance(body, str) else None,
        extensions={"sni_hostname": url.host},
    )


def _send(client: httpx.Client, request: httpx.Request, secrets: tuple[str, ...]) -> TaskResult:
    response = client.send(request, stream=True)
    try:
        excerpt = bytearray()
        for chunk in response.iter_raw():
            excerpt += chunk
            if len(excerpt) > EXCERPT_BYTES:
                break
    finally:
        response.close()
    cut = len(excerpt) > EXCERPT_BYTES
    text = bytes(excerpt[:EXCERPT_BYTES]).decode("utf-8", errors="replace")
    text = scrub_excerpt(text, secrets, cut_head=False, cut_tail=cut)
    status = response.status_code
    detail = f"HTTP {status}; body: {text}" if text else f"HTTP {status}"
    if 200 <= status < 300:
        return TaskResult(True, None, detail)
    if 300 <= status < 400:
        where = response.headers.get("location", "?")
        return TaskResult(False, f"HTTP {status} redirect to {where} (not followed)", detail)
    if not text.strip():
        return TaskResult(False, f"HTTP {status}", detail)
    short = text.strip()
    if len(short) > ERROR_EXCERPT_CHARS:
        short = scrub_excerpt(short[:ERROR_EXCERPT_CHARS], secrets, cut_head=False, cut_tail=True)
    return TaskResult(False, f"HTTP {status}; body: {short}", detail)


TASK = TaskType("http", HttpTask, run_http)
