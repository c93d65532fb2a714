"""What the PostgreSQL benchmarks share: a scratch database on the stack's server, made
and dropped, and the server's facts printed at the start of a run (its version and the
settings that move the figures). Imported by the benchmarks as a sibling module
(`python benchmarks/NAME.py` puts this folder first on the path)."""

from __future__ import annotations

import time

import psycopg
from sqlalchemy.engine import URL

KNOBS = ("shared_buffers", "work_mem", "max_wal_size", "synchronous_commit")


def log(msg: str) -> None:
    print(msg, flush=True)


def pg_url(url: URL) -> str:
    """A libpq URL for psycopg from the SQLAlchemy URL of the settings."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def server_facts(admin: URL) -> tuple[str, dict[str, str]]:
    """The server's version string and KNOBS, as the run's first log line shows them."""
    with psycopg.connect(pg_url(admin)) as conn:
        server = conn.execute("SELECT version()").fetchone()[0]
        knobs = {k: conn.execute(f"SHOW {k}").fetchone()[0] for k in KNOBS}
    return server, knobs


def drop_database(admin: URL, name: str) -> None:
    """Without FORCE: that would try to terminate autovacuum workers, which this role may
    not signal; a plain DROP cancels them itself. Retried while a worker lets go."""
    with psycopg.connect(pg_url(admin), autocommit=True) as conn:
        for attempt in range(30):
            try:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
                return
            except psycopg.errors.ObjectInUse:
                if attempt == 29:
                    raise
                time.sleep(1)


def recreate_database(admin: URL, name: str) -> None:
    drop_database(admin, name)
    with psycopg.connect(pg_url(admin), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
