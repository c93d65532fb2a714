"""Which values of a task are secret, how the API shows them, and scrubbing."""

from __future__ import annotations

import base64
import re
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from yarl import URL

from kit.core.redaction import (
    MASK,
    basic_credential,
    is_masked_url,
    redact_task,
    redact_url,
    scrub,
    scrub_excerpt,
    secret_values,
)
from kit.tasks.http import _prepared

HTTP = {
    "type": "http",
    "url": "https://example.org/",
    "method": "POST",
    "headers": {"authorization": "Bearer tok-123456", "X-Api-Key": "key-987654", "X-Trace": "1"},
    "secret_headers": ["x-api-key"],
}


def test_authorization_always_and_named_headers_are_secret_case_insensitively() -> None:
    shown = redact_task(HTTP)
    assert shown["headers"] == {"authorization": MASK, "X-Api-Key": MASK, "X-Trace": "1"}
    assert shown["secret_headers"] == ["x-api-key"]
    assert HTTP["headers"]["authorization"] == "Bearer tok-123456"  # not mutated
    assert set(secret_values(HTTP)) == {"Bearer tok-123456", "tok-123456", "key-987654"}


def test_command_secret_env() -> None:
    task = {
        "type": "command",
        "argv": ["/x"],
        "env": {"A": "a-secret", "B": "b"},
        "secret_env": ["A"],
    }
    assert redact_task(task)["env"] == {"A": MASK, "B": "b"}
    assert secret_values(task) == ("a-secret",)
    assert redact_task({"type": "command", "argv": ["/x"], "env": {"A": "1"}})["env"] == {"A": "1"}


def test_scrub_replaces_longest_first_and_ignores_tiny_values() -> None:
    text = "got Bearer tok-123456 and tok-123456 and ab"
    assert scrub(text, ["tok-123456", "Bearer tok-123456", "ab"]) == (
        f"got {MASK} and {MASK} and ab"
    )


_filler = st.text(st.sampled_from(" -.\n"), max_size=300)


@given(
    secret=st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=4, max_size=40),
    before=_filler,
    after=_filler,
    cut=st.integers(min_value=0, max_value=400),
    tail=st.integers(min_value=0, max_value=400),
)
def test_no_fragment_of_a_secret_survives_where_an_excerpt_was_cut(
    secret: str, before: str, after: str, cut: int, tail: int
) -> None:
    """The filler has no letter or digit: whatever letter is left is part of the secret."""
    whole = before + secret + after
    end = max(cut, len(whole) - tail)
    excerpt = whole[cut:end]
    shown = scrub_excerpt(excerpt, [secret], cut_head=cut > 0, cut_tail=end < len(whole))
    assert not any(c.isalnum() for c in shown.replace(MASK, ""))


# -- credentials in a URL -------------------------------------------------------------------

HOOK = {
    "type": "http",
    "url": "https://hook-user:s3cr%40t-91@example.org/hook?x=a@b",
    "method": "GET",
}


def test_url_credentials_are_secret_like_an_authorization_header() -> None:
    shown = redact_task(HOOK)
    assert shown["url"] == f"https://{MASK}@example.org/hook?x=a@b"
    assert HOOK["url"].startswith("https://hook-user:")  # not mutated
    values = set(secret_values(HOOK))
    basic = base64.b64encode(b"hook-user:s3cr@t-91").decode()  # what the worker sends
    assert {"hook-user:s3cr%40t-91", "hook-user:s3cr@t-91", "s3cr@t-91", basic} <= values
    error = f"HTTP 401; body: denied for Basic {basic} at {HOOK['url']}"
    assert "s3cr" not in scrub(error, values) and basic not in scrub(error, values)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://example.org/a@b", "https://example.org/a@b"),  # an @ of the path
        ("https://example.org/?q=a@b#c@d", "https://example.org/?q=a@b#c@d"),
        ("https://token-only@example.org/", f"https://{MASK}@example.org/"),
        ("http://a:b@c@example.org:8080/x", f"http://{MASK}@example.org:8080/x"),
        ("https://@example.org/", f"https://{MASK}@example.org/"),
    ],
)
def test_only_the_authoritys_userinfo_is_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert is_masked_url(shown) == (shown != url)


_userinfo_chars = st.sampled_from(
    [*"abcXYZ019-._~!$&'()*+,;=", "%40", "%3A", "%2F", "%25", "%C3%A9", "%20", "%ZZ", "%C3"]
)


@given(
    user=st.lists(_userinfo_chars, min_size=1, max_size=12).map("".join),
    password=st.lists(_userinfo_chars | st.just(":"), min_size=4, max_size=16).map("".join),
)
def test_the_basic_credential_the_worker_sends_is_one_of_the_secrets(
    user: str, password: str
) -> None:
    """Whatever the userinfo, the `Authorization: Basic` value kit.tasks.http derives from
    it (through yarl) is scrubbed, and the page shows none of it."""
    url = f"https://{user}:{password}@example.org/hook"
    head = _prepared("GET", url, (), None).head.decode("latin-1")
    sent = re.search(r"Authorization: Basic (\S+)", head)
    assert sent is not None
    task = {"type": "http", "url": url, "method": "GET"}
    assert sent.group(1) in secret_values(task)
    echoed = f"denied: Authorization: Basic {sent.group(1)} for {url}"
    assert sent.group(1) not in scrub(echoed, secret_values(task))
    assert f"{user}:{password}" not in scrub(echoed, secret_values(task))
    assert redact_task(task)["url"] == f"https://{MASK}@example.org/hook"


@given(
    user=st.text(st.characters(codec="utf-8", exclude_characters=":"), min_size=1, max_size=8),
    password=st.text(st.characters(codec="utf-8"), min_size=1, max_size=12),
)
def test_the_basic_credential_decodes_as_url_parsers_do(user: str, password: str) -> None:
    """For any text percent-encoded into a URL, the credential is what yarl (which the
    worker used to derive it with) decodes."""
    userinfo = f"{quote(user, safe='')}:{quote(password, safe='')}"
    parsed = URL(f"https://{userinfo}@example.org/")
    expected = base64.b64encode(f"{parsed.user}:{parsed.password}".encode()).decode()
    assert basic_credential(userinfo) == expected
