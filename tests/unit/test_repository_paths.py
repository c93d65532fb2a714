"""The repository stands on its own: nothing it holds points outside it, every page a
document links to is there, and docs/ stays pages a user reads.

Rules, on every tracked text file:
- no path that climbs out of the repository: each `../` path is resolved against the
  directory of the file that names it and must stay inside the repository; one that
  names nothing there is read as the repository's prose names paths (from its root, as
  `kit/core` or `docs/design.md`) and must stay inside from the root too;
- no absolute path into the team's workspace or into root's or a user's home directory,
  except the kit's own state directory there (`<home>/.cronfleet`, the default
  `CRONFLEET_HOME`). A scratch path a command writes to (under /tmp) is the user's choice
  and allowed;
- every relative link or image of a markdown file, and every `docs/<page>.md` or
  `docs/<image>.png` any file names, exists (but in benchmarks/results/: the commands
  recorded there are as they were run).
And docs/ holds no script (.py, .sh) and weighs under 3 MiB on disk (as `du` counts it).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS_LIMIT_BYTES = 3 * 1024 * 1024
# Not the repository's own text: local state and tool output never committed.
_UNTRACKED_DIRS = {".git", "out", "mutants", ".cronfleet", "build", "dist", "node_modules"}

# A `../` path, not part of `.../` (an ellipsis), of a longer name or of an absolute
# path (`/srv/acme/../x` is a value under test, not a reference).
_CLIMB = re.compile(r"(?<![\w./])((?:\.\./)+[\w.\-/]*)")
# The workspace root and home directories; written so this file does not match itself.
_WORKSPACE = re.compile(r"(?<![\w.~-])/wor[k]/")
_HOME = re.compile(r"(?<![\w.~-])/(?:roo[t]|hom[e]/[^/\s\"'`]+|User[s]/[^/\s\"'`]+)/([^\s\"'`)]*)")
_KIT_HOME = ".cronfleet"
# [text](target) and ![alt](target), the target up to a space or the closing parenthesis.
_MD_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_DOCS_NAMED = re.compile(r"(?<![\w./-])(docs/[\w./-]+\.(?:md|png))")
RESULTS = ROOT / "benchmarks" / "results"


def tracked_files(root: Path = ROOT) -> list[Path]:
    """The files git tracks; without git (an unpacked archive), every file but local
    state and tool output."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        found = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in _UNTRACKED_DIRS]
            found += [Path(d, name) for name in names]
        return found
    return [root / name for name in out.decode().split("\0") if name]


def text_of(path: Path) -> str | None:
    """The file as UTF-8 text, or None for a binary (or vanished) file."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def outside_references(path: Path, text: str, root: Path = ROOT) -> Iterator[str]:
    """Every path in `text` (the contents of `path`) that leads outside `root`."""
    for match in _CLIMB.finditer(text):
        name = match.group(1)
        from_file = os.path.normpath(os.path.join(path.parent, name))
        if _escapes(from_file, root) or (
            not os.path.exists(from_file) and _escapes(os.path.join(root, name), root)
        ):
            yield name
    for match in _WORKSPACE.finditer(text):
        yield text[match.start() : match.end() + 30].split()[0]
    for match in _HOME.finditer(text):
        if not match.group(1).startswith(_KIT_HOME):
            yield match.group(0)


def _escapes(target: str, root: Path) -> bool:
    return os.path.relpath(os.path.normpath(target), root).split(os.sep)[0] == ".."


def missing_targets(path: Path, text: str, root: Path = ROOT) -> Iterator[str]:
    """Relative markdown links of `path` (a .md file) and `docs/...` names anywhere that
    name no file of `root`."""
    if path.suffix == ".md":
        for match in _MD_LINK.finditer(text):
            target = match.group(1).split("#", 1)[0].split("?", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                continue  # an anchor in the page, a URL, an absolute URL path
            if not (path.parent / target).exists():
                yield target
    if path.is_relative_to(RESULTS):
        return
    for match in _DOCS_NAMED.finditer(text):
        if not (root / match.group(1)).exists():
            yield match.group(1)


def _findings(check: Callable[[Path, str], Iterator[str]]) -> list[str]:
    found: list[str] = []
    for path in tracked_files():
        text = text_of(path)
        if text is not None:
            found += [f"{path.relative_to(ROOT)}: {ref}" for ref in check(path, text)]
    return found


def test_no_reference_to_a_path_outside_the_repository() -> None:
    found = _findings(outside_references)
    assert not found, "paths outside the repository:\n" + "\n".join(found)


def test_every_linked_document_exists() -> None:
    found = _findings(missing_targets)
    assert not found, "links to files that are not there:\n" + "\n".join(found)


def _docs_files() -> list[Path]:
    return [Path(d, name) for d, _dirs, names in os.walk(ROOT / "docs") for name in names]


def test_docs_hold_no_scripts() -> None:
    scripts = [p.relative_to(ROOT) for p in _docs_files() if p.suffix in {".py", ".sh"}]
    assert not scripts, f"scripts belong in benchmarks/ or scripts/, not docs/: {scripts}"


def test_docs_weigh_under_three_mebibytes() -> None:
    def on_disk(path: Path) -> int:
        st = path.stat()
        return getattr(st, "st_blocks", 0) * 512 or st.st_size

    dirs = [Path(d) for d, _dirs, _names in os.walk(ROOT / "docs")]
    total = sum(on_disk(p) for p in [*dirs, *_docs_files()])
    assert total < DOCS_LIMIT_BYTES, f"docs/ is {total / 2**20:.2f} MiB on disk"


def test_the_rules_catch_what_they_are_for() -> None:
    """Each rule on a planted file: a reference that climbs out, a workspace path, a
    home path, a missing link and a missing docs page are found; the kit's home, a scratch
    path and a link inside the repository are not."""
    up = "." + "./"  # so that this file names no such path itself
    page = ROOT / "docs" / "a-page.md"
    planted = (
        f"see {up}shared/DESIGN.md and {up}README.md, /wor" + "k/main/kit, /roo" + "t/notes.txt,\n"
        "~/.cronfleet and /roo" + "t/.cronfleet/stack.env, /tmp/journal, .../stat\n"
        "[gone](nowhere.md) [here](design.md) [web](https://example.org/x.md) [top](#top)\n"
        "docs/" + "no-such-page.md docs/design.md\n"
    )
    outside = list(outside_references(page, planted))
    assert outside == [f"{up}shared/DESIGN.md", "/wor" + "k/main/kit,", "/roo" + "t/notes.txt,"]
    readme = ROOT / "README.md"
    lock = f"{up}shared/tools/lock"
    assert list(outside_references(readme, f"`{lock}`")) == [lock]
    assert list(missing_targets(page, planted)) == ["nowhere.md", "docs/" + "no-such-page.md"]
    deep = ROOT / "terraform" / "examples" / "small" / "main.tf"
    assert list(outside_references(deep, f'source = "{up * 2}modules/network"')) == []
    climbing = up * 3 + "x"  # one level above the repository
    assert list(outside_references(deep, f'source = "{climbing}"')) == [climbing]
