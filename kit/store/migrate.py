"""Alembic, driven from code: the migration scripts live inside the package, so
`cronfleet db upgrade` works from any directory without an alembic.ini."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from kit.store.run_history import ensure_run_days

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # `%` would be read as interpolation by configparser.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate; at the head, also make the run history's days (today and the days
    ahead), so a new database takes runs into their days from its first scan."""
    command.upgrade(alembic_config(database_url), revision)
    if revision == "head":
        engine = create_engine(database_url, hide_parameters=True)
        try:
            ensure_run_days(engine)
        finally:
            engine.dispose()


def current_revision(database_url: str) -> str | None:
    """The revision the database is at (None when never migrated)."""
    engine = create_engine(database_url, hide_parameters=True)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision(database_url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()
