"""The console's plumbing: templates, the session cookie, CSRF, forms, security headers.

- Login takes an API token and opens a session (kit.store.console_sessions); the
  cookie `cf_session` is HttpOnly, SameSite=Strict, limited to /console, and Secure
  when the request came over HTTPS (or CRONFLEET_CONSOLE_SECURE_COOKIE is set, for a
  TLS-terminating proxy).
- Every form that changes something carries the session's CSRF token, compared in
  constant time; a request whose Origin header names another site is refused too.
  The login form has its own double-submit token (cookie + field).
- Pages are sent with a Content-Security-Policy allowing only this origin's own
  scripts and styles (no inline script), and may not be framed.
- The token's scopes hold as over /v1: a page needs `read` (a token without it cannot
  sign in), an action `write` (and `command` for a command task, checked by the API's
  own edit).
- A page's one-line message is never text from the URL: an action's message travels in
  a cookie signed with the session's CSRF token, shown once; a page reached without a
  session shows only one of NOTICES, by key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from kit.api.body import problems_in
from kit.api.fleet import is_operator
from kit.api.state import engine_of, settings_of
from kit.api.tenancy import rate_refusal
from kit.store.console_sessions import ConsoleSession, session_resolve

HERE = Path(__file__).parent
SESSION_COOKIE = "cf_session"
LOGIN_CSRF_COOKIE = "cf_login_csrf"
FLASH_COOKIE = "cf_flash"
PREFIX = "/console"
MAX_FORM_FIELDS = 100
_PARAM = re.compile(r"[a-z_]{1,20}")  # the console's own parameter names
# The ids the kit issues; PostgreSQL's uuid type refuses some of what Python's
# uuid.UUID() takes (`urn:uuid:...`, hyphens elsewhere), so the console asks for no other.
_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "object-src 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _shown(value: Any) -> str:
    """An audit value as a person reads it: JSON-ish, absent as a dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return str(value)


templates.filters["shown"] = _shown


class LoginRequired(Exception):
    """A page needs a session: the handler redirects to the login form."""


class ConsoleError(Exception):
    """Rendered as an error page with this status (404 for another tenant's ids)."""

    def __init__(
        self,
        status: int,
        message: str,
        problems: list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = problems or []  # (field, reason), for a form to show beside it
        self.headers = headers or {}


NO_READ = "this token lacks the 'read' scope: the console shows nothing without it"
# What a page reached without a session may say (`?notice=<key>`): nothing else.
NOTICES = {
    "signed_out": "signed out",
    "session_ended": "your session ended: sign in again",
}


@dataclass(frozen=True)
class Page:
    """What every page template gets besides its own data."""

    session: ConsoleSession | None
    flash: str | None
    operator: bool = False  # kit.api.fleet.is_operator: the fleet-wide view is its

    @property
    def can_write(self) -> bool:
        return self.session is not None and self.session.token.allows("write")


def secure_cookie(request: Request) -> bool:
    return request.url.scheme == "https" or settings_of(request).console_secure_cookie


def _signature(session: ConsoleSession, message: str) -> str:
    key = session.csrf_token.encode()
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def _flash_of(request: Request, session: ConsoleSession | None) -> str | None:
    """The message this page may show: the action's, signed for this session, or a
    notice by key; never caller text."""
    if session is None:
        return NOTICES.get(request.query_params.get("notice", ""))
    encoded, _, signature = request.cookies.get(FLASH_COOKIE, "").partition(".")
    try:
        message = base64.urlsafe_b64decode(encoded.encode()).decode()
    except (ValueError, UnicodeError):
        return None
    if not signature or not hmac.compare_digest(
        signature.encode(), _signature(session, message).encode()
    ):
        return None
    return message


def render(
    request: Request,
    template: str,
    status_code: int = 200,
    session: ConsoleSession | None = None,
    **context: Any,
) -> HTMLResponse:
    page = Page(session, _flash_of(request, session), is_operator(request, session))
    html = templates.get_template(template).render(page=page, request=request, **context)
    response = HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)
    if FLASH_COOKIE in request.cookies:  # shown once
        response.delete_cookie(FLASH_COOKIE, path=PREFIX)
    return response


def redirect(location: str, *, notice: str | None = None) -> RedirectResponse:
    """A 303 to `location`, whose page shows `notice` (a NOTICES key) if given."""
    if notice is not None:
        if notice not in NOTICES:
            raise ValueError(f"not a notice: {notice!r}")
        sep = "&" if "?" in location else "?"
        location = f"{location}{sep}{urlencode({'notice': notice})}"
    return RedirectResponse(location, status_code=303, headers=SECURITY_HEADERS)


def answered(
    request: Request, session: ConsoleSession, location: str, message: str
) -> RedirectResponse:
    """An action's answer: a 303 to `location`, whose page shows `message` once (a
    cookie signed for this session: no other session, and no link, can set it)."""
    response = redirect(location)
    encoded = base64.urlsafe_b64encode(message.encode()).decode()
    response.set_cookie(
        FLASH_COOKIE,
        f"{encoded}.{_signature(session, message)}",
        max_age=60,
        path=PREFIX,
        httponly=True,
        secure=secure_cookie(request),
        samesite="strict",
    )
    return response


def safe_next(value: str | None, default: str = f"{PREFIX}/jobs") -> str:
    """Only a path of this console: never another site (an open redirect)."""
    if not value:
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not parts.path.startswith(PREFIX + "/"):
        return default
    if value.startswith("//") or "\\" in value:
        return default
    return value


async def current_session(request: Request) -> ConsoleSession | None:
    """The page's session; its tenant's requests count against the operator's API rate
    for the tenant, as /v1's do (kit.api.tenancy): over it, a 429 page."""
    secret = request.cookies.get(SESSION_COOKIE)
    if not secret:
        return None
    session = await run_in_threadpool(session_resolve, engine_of(request), secret)
    if session is not None:
        refusal = rate_refusal(request.app.state, session.token)
        if refusal is not None:
            raise ConsoleError(429, refusal.message, headers=refusal.headers)
    return session


async def require_session(request: Request) -> ConsoleSession:
    session = await current_session(request)
    if session is None:
        raise LoginRequired()
    return session


async def require_reader(request: Request) -> ConsoleSession:
    """A page's session: its token reads (`read` or `admin`), as GET on /v1 needs."""
    session = await require_session(request)
    if not session.token.allows("read"):
        raise ConsoleError(403, NO_READ)
    return session


async def checked_inputs(request: Request) -> None:
    """Before any console handler: an id of the path that is not one the kit issues is a
    404 (as an unknown id), and a query value the API's strict parser would refuse (NUL,
    a lone surrogate) is a 422 naming the parameter
    (`tests/integration/test_console_fuzz.py`)."""
    for name, value in request.path_params.items():
        if name.endswith("_id") and not _ID.fullmatch(str(value)):
            raise ConsoleError(404, "no such object for this tenant")
    problems = [p for k, v in request.query_params.multi_items() for p in problems_in({k: v})]
    if problems:  # a parameter named by the caller is not repeated on the page
        named = [(f if _PARAM.fullmatch(f) else "a query parameter", r) for f, r in problems]
        raise ConsoleError(422, "; ".join(f"{field}: {reason}" for field, reason in named))


async def read_form(request: Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body (the body limit already applies)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ConsoleError(415, "forms are sent as application/x-www-form-urlencoded")
    body = (await request.body()).decode("utf-8", "replace")
    try:
        parsed = parse_qs(body, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError as exc:
        raise ConsoleError(400, "too many form fields") from exc
    return {k: v[-1] for k, v in parsed.items()}


def _same_origin(request: Request) -> bool:
    """The Origin a browser sends with a form names this host (the scheme may differ
    behind a TLS-terminating proxy); no Origin at all leaves it to the CSRF token."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc == request.headers.get("host")


async def checked_form(request: Request, session: ConsoleSession) -> dict[str, str]:
    """The form of a state-changing request, after its CSRF token and Origin passed."""
    form = await read_form(request)
    sent = form.get("csrf", "").encode()
    if not _same_origin(request) or not hmac.compare_digest(sent, session.csrf_token.encode()):
        raise ConsoleError(403, "the form is stale or did not come from this console: reload it")
    return form


async def checked_form_lists(request: Request, session: ConsoleSession) -> dict[str, list[str]]:
    """`checked_form` for a form whose fields repeat (ticked runs of a bulk action):
    every value of each field, in order."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ConsoleError(415, "forms are sent as application/x-www-form-urlencoded")
    body = (await request.body()).decode("utf-8", "replace")
    try:
        parsed = parse_qs(body, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError as exc:
        raise ConsoleError(400, "too many form fields") from exc
    sent = (parsed.get("csrf") or [""])[-1].encode()
    if not _same_origin(request) or not hmac.compare_digest(sent, session.csrf_token.encode()):
        raise ConsoleError(403, "the form is stale or did not come from this console: reload it")
    problems = [p for k, vs in parsed.items() for v in vs for p in problems_in({k: v})]
    if problems:
        raise ConsoleError(422, "; ".join(f"{f}: {r}" for f, r in problems[:3]))
    return parsed


def require_write(session: ConsoleSession) -> None:
    if not session.token.allows("write"):
        raise ConsoleError(403, "this token lacks the 'write' scope")


def new_login_csrf() -> str:
    return secrets.token_urlsafe(24)


def set_session_cookie(response: Response, request: Request, secret: str, ttl_s: int) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=ttl_s,
        path=PREFIX,
        httponly=True,
        secure=secure_cookie(request),
        samesite="strict",
    )
