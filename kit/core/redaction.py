"""Secrets a job carries: which values they are, their redacted form, their scrubbing.

A secret is the value of an HTTP task's `Authorization` or `Proxy-Authorization`
header (always), of a header the job names in `secret_headers`, or of an environment
variable a command task names in `secret_env`. Such values are write-only through the
API (answers show `MASK` in their place), and the worker removes each of them, and the
credentials part of an `Authorization` value, from whatever a run records (a command's
stderr, a failed response's body): a target that echoes its request back does not
publish the token.

A value shorter than MIN_SCRUB_CHARS is not scrubbed (it would blank ordinary text);
one the target transforms (encodes, splits) cannot be recognised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MASK = "(secret)"
MIN_SCRUB_CHARS = 4
ALWAYS_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization"})


def secret_header_names(task: Mapping[str, Any]) -> frozenset[str]:
    """Lower-cased names of an http task's secret headers."""
    named = {str(n).lower() for n in task.get("secret_headers") or ()}
    return frozenset(named | ALWAYS_SECRET_HEADERS)


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
