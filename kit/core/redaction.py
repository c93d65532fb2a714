"""Secrets a job carries: which values they are, their redacted form, their scrubbing.

A secret is the value of an HTTP task's `Authorization` or `Proxy-Authorization`
header (always), the credentials of its URL (`https://user:pass@host/`: the worker
sends them as an `Authorization: Basic` header), the value of a header the job names in
`secret_headers`, or of an environment variable a command task names in `secret_env`.
Such values are write-only through the API (answers show `MASK` in their place:
`https://(secret)@host/`), and the worker removes each of them, the credentials part of
an `Authorization` value and the Basic credential a URL's userinfo becomes, from
whatever a run records (a command's stderr, a failed response's body): a target that
echoes its request back does not publish the token.

A value shorter than MIN_SCRUB_CHARS is not scrubbed (it would blank ordinary text);
one the target transforms (encodes, splits) cannot be recognised.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "(secret)"
MIN_SCRUB_CHARS = 4
ALWAYS_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization"})


def secret_header_names(task: Mapping[str, Any]) -> frozenset[str]:
    """Lower-cased names of an http task's secret headers."""
    named = {str(n).lower() for n in task.get("secret_headers") or ()}
    return frozenset(named | ALWAYS_SECRET_HEADERS)


def _userinfo_span(url: str) -> tuple[int, int] | None:
    """Where a URL's userinfo is (`user:pass` of `https://user:pass@host/`), as its parser
    finds it: the authority runs from `//` to the first `/`, `?` or `#`, and its
    userinfo to the authority's last `@`. None without one."""
    start = url.find("//")
    if start < 0:
        return None
    start += 2
    end = len(url)
    for stop in "/?#":
        found = url.find(stop, start)
        if 0 <= found < end:
            end = found
    at = url.rfind("@", start, end)
    return (start, at) if at >= 0 else None


def url_userinfo(url: str) -> str | None:
    """The URL's userinfo as written (percent-escapes kept), or None."""
    span = _userinfo_span(url)
    return None if span is None else url[span[0] : span[1]]


def redact_url(url: str) -> str:
    """The URL as the API shows it: its userinfo, if any, replaced by MASK."""
    span = _userinfo_span(url)
    return url if span is None else url[: span[0]] + MASK + url[span[1] :]


def is_masked_url(url: str) -> bool:
    """A URL whose credentials are MASK: one the API showed, sent back as is."""
    userinfo = url_userinfo(url)
    return userinfo is not None and MASK in (userinfo, _decoded(userinfo))


def _octets(text: str) -> bytes:
    """Percent-decoded to the octets it stands for (RFC 3986); other characters as UTF-8."""
    out = bytearray()
    i = 0
    while i < len(text):
        pair = text[i + 1 : i + 3]
        if text[i] == "%" and len(pair) == 2 and all(c in _HEX for c in pair):
            out.append(int(pair, 16))
            i += 3
        else:
            out += text[i].encode("utf-8", "surrogatepass")
            i += 1
    return bytes(out)


_HEX = frozenset("0123456789abcdefABCDEF")


def _decoded(text: str) -> str:
    return _octets(text).decode("utf-8", "replace")


def basic_credential(userinfo: str) -> str:
    """The `Authorization: Basic` value a URL's userinfo is sent as (RFC 7617): base64 of
    the decoded user, `:`, the decoded password. kit.tasks.http sends this one."""
    user, _, password = userinfo.partition(":")
    return base64.b64encode(_octets(user) + b":" + _octets(password)).decode()


def _userinfo_secrets(userinfo: str) -> set[str]:
    """The userinfo as written and decoded, the password (or, without one, the user),
    and the Basic credential the worker sends for it."""
    user, colon, password = userinfo.partition(":")
    values = {userinfo, _decoded(userinfo), basic_credential(userinfo)}
    values |= {password, _decoded(password)} if colon else {user, _decoded(user)}
    return {v for v in values if v}


def secret_values(task: Mapping[str, Any]) -> tuple[str, ...]:
    """Every secret value of a task spec, longest first (the order to scrub them in)."""
    values: set[str] = set()
    if task.get("type") == "http":
        names = secret_header_names(task)
        for name, value in dict(task.get("headers") or {}).items():
            if str(name).lower() in names and isinstance(value, str):
                values.add(value)
                _scheme, _, credentials = value.strip().partition(" ")
                if credentials.strip():
                    values.add(credentials.strip())
        userinfo = url_userinfo(str(task.get("url") or ""))
        if userinfo:
            values |= _userinfo_secrets(userinfo)
    elif task.get("type") == "command":
        env = dict(task.get("env") or {})
        for name in task.get("secret_env") or ():
            value = env.get(name)
            if isinstance(value, str):
                values.add(value)
    return tuple(sorted(values, key=len, reverse=True))


def redact_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """The task spec as the API shows it: secret values replaced by MASK."""
    shown = dict(task)
    if task.get("type") == "http" and isinstance(task.get("url"), str):
        shown["url"] = redact_url(task["url"])
    if task.get("type") == "http" and task.get("headers"):
        names = secret_header_names(task)
        shown["headers"] = {
            k: (MASK if str(k).lower() in names else v) for k, v in task["headers"].items()
        }
    elif task.get("type") == "command" and task.get("env") and task.get("secret_env"):
        secret = set(task["secret_env"])
        shown["env"] = {k: (MASK if k in secret else v) for k, v in task["env"].items()}
    return shown


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value (long enough to recognise) replaced by MASK."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_SCRUB_CHARS and secret in text:
            text = text.replace(secret, MASK)
    return text


def scrub_excerpt(text: str, secrets: Iterable[str], cut_head: bool, cut_tail: bool) -> str:
    """Scrub an excerpt of a longer output. Where the excerpt was cut, the part of a
    secret that straddled the cut would remain: the cut edge loses as many characters
    as the longest secret has, so no fragment survives."""
    secrets = [s for s in secrets if len(s) >= MIN_SCRUB_CHARS]
    text = scrub(text, secrets)
    edge = max((len(s) for s in secrets), default=0)
    if edge and cut_head:
        text = "…" + text[edge:]
    if edge and cut_tail:
        text = text[: max(0, len(text) - edge)] + "…"
    return text


def redact_webhook(webhook: Mapping[str, Any]) -> dict[str, Any]:
    """A job's failure webhook (`notify`) as the API shows it: as an http task's request,
    its secret header values and URL credentials masked."""
    shown = redact_task({**webhook, "type": "http"})
    shown.pop("type", None)
    return shown


def webhook_secret_values(webhook: Mapping[str, Any]) -> tuple[str, ...]:
    """The secret values of a failure webhook, longest first."""
    return secret_values({**webhook, "type": "http"})
