"""An attempt's output as the kit keeps it: a bounded excerpt of what a command wrote
(stdout and stderr) or of what an HTTP target answered, scrubbed of the job's secrets.

Two rules hold for every excerpt (tests/property/test_output_excerpt_props.py):
- it is at most `cap_bytes` bytes of UTF-8, whatever the output and the secrets (a
  secret's mask is longer than a short secret, so the cap is applied after scrubbing);
- no secret value (kit.core.redaction: long enough to recognise) appears in it: whole
  secrets are masked in the full window first, the cut edge loses as many characters as
  the longest secret has (no fragment of one straddling the cut survives), and an excerpt
  that would still show one is withheld whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from kit.core.redaction import MIN_SCRUB_CHARS, scrub

OUTPUT_CAP_BYTES = 4096  # per stream of an attempt: the schema's CHECK holds the same
ELLIPSIS = "…"
WITHHELD = "(output withheld: it showed a secret value)"


@dataclass(frozen=True)
class Output:
    """What one attempt produced: `text` is a command's stdout or an HTTP task's status
    line and the start of its body; `stderr` a command's stderr."""

    text: str = ""
    stderr: str = ""

    def __bool__(self) -> bool:
        return bool(self.text or self.stderr)


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _cut(text: str, limit: int, keep: Literal["head", "tail"]) -> str:
    """At most `limit` bytes of `text` from one end, never half a character."""
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    part = raw[:limit] if keep == "head" else raw[len(raw) - limit :] if limit else b""
    return part.decode("utf-8", "ignore")


def excerpt(
    text: str,
    secrets: Iterable[str],
    cap_bytes: int = OUTPUT_CAP_BYTES,
    *,
    keep: Literal["head", "tail"] = "tail",
    cut: bool = False,
) -> str:
    """`text` bounded to `cap_bytes` and scrubbed of `secrets`. `keep`: which end of a
    longer output is kept (a command's last lines, a response's first bytes). `cut`: the
    text was already cut at the other end by its reader (a secret may straddle that
    edge too)."""
    if cap_bytes < 0:
        raise ValueError("cap_bytes must be >= 0")
    known = [s for s in secrets if len(s) >= MIN_SCRUB_CHARS]
    window = scrub(text.replace("\x00", "\\0"), known)
    if not cut and _utf8_bytes(window) <= cap_bytes:
        shown = window
    else:
        edge = max((len(s) for s in known), default=0)
        room = max(0, cap_bytes - _utf8_bytes(ELLIPSIS))
        part = _cut(window, room, keep)
        if keep == "tail":
            shown = ELLIPSIS + part[edge:]
        else:
            shown = part[: max(0, len(part) - edge)] + ELLIPSIS
        if _utf8_bytes(shown) > cap_bytes:  # a cap smaller than the ellipsis itself
            shown = ""
    if any(s in shown for s in known):  # a mask and its neighbours spelling a secret
        shown = WITHHELD if _utf8_bytes(WITHHELD) <= cap_bytes else ""
    return shown
