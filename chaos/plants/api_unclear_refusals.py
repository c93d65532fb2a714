"""Planted bug (api): every database error is answered "the database is unavailable", a
full disk too, although the server is up and refuses writes for lack of space (what the
API said before it told the two apart): the disk-full drill must fail, saying the API
refused writes without saying why."""

from __future__ import annotations

from kit.api import errors


def plant() -> None:
    errors.database_refusal = lambda exc: errors.database_unavailable()


if __name__ == "__main__":
    plant()
    from kit.cli import main

    raise SystemExit(main())
