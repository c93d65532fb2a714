"""A scratch database on the stack's server, made, migrated with the kit's own Alembic
migrations and dropped: what `cronfleet calibrate` measures the kit's statements on
and the PostgreSQL benchmarks load (benchmarks/scratch_db.py re-exports these)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import URL

from kit.store import migrate


def pg_url(url: URL) -> str:
    """A libpq URL for psycopg from a SQLAlchemy URL."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


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


@contextmanager
def migrated_database(admin: URL, name: str) -> Iterator[URL]:
    """A fresh database `name` at the migrations' head (its SQLAlchemy URL), dropped on
    the way out."""
    recreate_database(admin, name)
    db = admin.set(database=name)
    try:
        migrate.upgrade(db.render_as_string(hide_password=False))
        yield db
    finally:
        drop_database(admin, name)
