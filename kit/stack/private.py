"""The local stack's files are its user's alone.

A tenant's command runs as another user (its `run_as`) on the same host, and the stack's
home holds the database password, Kafka's data and both servers' logs. So:

- `$CRONFLEET_HOME` is 0700. Where the stack runs as root, PostgreSQL runs as the
  `postgres` user and must pass through the home to its data directory: the home is
  then 0710 with the `postgres` group (search, no listing), never open to others.
- `cronfleet stack up` runs under umask 077 (`PRIVATE_UMASK`), and so do the servers it
  starts: what they create is 0600 (files) and 0700 (directories).
- `tighten` takes what an older `up` left open (0644 logs, 0755 directories) back to
  its owner: group and other permissions off every file and directory under the home,
  except the search permission of a directory whose group is `postgres` (the same
  passage). Symlinks and sockets are left alone; PostgreSQL keeps its data directory
  0700 itself.

`tests/integration/test_stack.py::test_the_stack_home_and_its_files_are_the_owners_alone`
holds this on the running stack, `tests/unit/test_stack_private.py` on a throwaway home.
"""

from __future__ import annotations

import contextlib
import grp
import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077


def postgres_gid() -> int | None:
    """The `postgres` group where the stack runs as root (its server runs as that user),
    else None: a stack of an ordinary user runs PostgreSQL as that user."""
    if os.geteuid() != 0:
        return None
    try:
        return grp.getgrnam("postgres").gr_gid
    except KeyError:  # not installed yet: `up` installs it, then asks again
        return None


def secure_home(home: Path) -> None:
    """The home 0700, or 0710 with the postgres group where PostgreSQL needs to pass."""
    home.mkdir(parents=True, exist_ok=True)
    gid = postgres_gid()
    if gid is None:
        home.chmod(0o700)
        return
    os.chown(home, -1, gid)
    home.chmod(0o710)


def tightened_mode(mode: int, gid: int, postgres: int | None) -> int:
    """`mode` without group and other permissions, but for a directory of the postgres
    group its group search bit."""
    keep = 0o010 if stat.S_ISDIR(mode) and postgres is not None and gid == postgres else 0
    return stat.S_IMODE(mode) & ~(0o077 & ~keep)


def tighten(home: Path) -> int:
    """Take group and other permissions off what is under `home` (not following
    symlinks); returns how many entries changed."""
    postgres = postgres_gid()
    changed = 0
    for root, dirs, files in os.walk(home):
        for name in (*dirs, *files):
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # a server removed it meanwhile
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                continue
            mode = tightened_mode(st.st_mode, st.st_gid, postgres)
            if mode != stat.S_IMODE(st.st_mode):
                with contextlib.suppress(PermissionError):  # another user's, not ours to change
                    os.chmod(path, mode)
                    changed += 1
    return changed
