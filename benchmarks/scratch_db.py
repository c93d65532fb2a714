"""What the PostgreSQL benchmarks share: a scratch database on the stack's server, made
and dropped (kit.store.scratch, which `cronfleet calibrate` uses too), and the server's
facts printed at the start of a run (its version and the settings that move the figures).
Imported by the benchmarks as a sibling module (`python benchmarks/NAME.py` puts this
folder first on the path)."""

from __future__ import annotations

import psycopg
from sqlalchemy.engine import URL

from kit.store.scratch import drop_database, pg_url, recreate_database

__all__ = ["KNOBS", "drop_database", "log", "pg_url", "recreate_database", "server_facts"]

KNOBS = ("shared_buffers", "work_mem", "max_wal_size", "synchronous_commit")


def log(msg: str) -> None:
    print(msg, flush=True)


def server_facts(admin: URL) -> tuple[str, dict[str, str]]:
    """The server's version string and KNOBS, as the run's first log line shows them."""
    with psycopg.connect(pg_url(admin)) as conn:
        server = conn.execute("SELECT version()").fetchone()[0]
        knobs = {k: conn.execute(f"SHOW {k}").fetchone()[0] for k in KNOBS}
    return server, knobs
