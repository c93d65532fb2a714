"""A database of its own for a full-size load test (scripts/loadtest_full.sh), on the
local stack's server: `create NAME` makes it, migrates it and prints its URL; `drop NAME`
drops it."""

from __future__ import annotations

import sys

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from kit.settings import load_settings
from kit.store import migrate


def main() -> None:
    action, name = sys.argv[1], sys.argv[2]
    if not name.replace("_", "").isalnum():
        raise SystemExit(f"name: {name!r} is not letters, digits and underscores")
    base = make_url(load_settings().database_url)
    # dropping from the script's exit trap, the settings name the database being dropped
    server = base if base.database != name else base.set(database="postgres")
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        if action == "create":
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    if action == "create":
        url = base.set(database=name).render_as_string(hide_password=False)
        migrate.upgrade(url)
        print(url)


if __name__ == "__main__":
    main()
