"""Which values of a task are secret, how the API shows them, and scrubbing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kit.core.redaction import MASK, redact_task, scrub, scrub_excerpt, secret_values

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
