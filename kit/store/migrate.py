"""Alembic, driven from code: the migration scripts live inside the package, so
`cronfleet db upgrade` works from any directory without an alembic.ini."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from kit.core.errors import FieldError
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


def current_revision(database_url: str, connect_timeout_s: int | None = None) -> str | None:
    """The revision the database is at (None when never migrated)."""
    timeout = {} if connect_timeout_s is None else {"connect_timeout": connect_timeout_s}
    engine = create_engine(database_url, hide_parameters=True, connect_args=timeout)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision(database_url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()


class SchemaState(StrEnum):
    """Where the database's schema stands to this code's migrations."""

    AT_HEAD = "at head"
    NEWER = "newer"  # a revision this code does not know: a later release's expand step
    BEHIND = "behind"  # a revision before this code's head, or never migrated


def schema_state(database_url: str) -> tuple[SchemaState, str | None, str | None]:
    """(state, the database's revision, this code's head). A service may start on AT_HEAD
    or NEWER (migrations are expand-only between consecutive releases: docs/operate.md,
    "Upgrading a live fleet"); BEHIND waits for an api machine's `cronfleet db upgrade`.
    tests/deploy/test_schema_gate.py holds the three cases."""
    script = ScriptDirectory.from_config(alembic_config(database_url))
    head = script.get_current_head()
    current = current_revision(database_url)
    if current == head:
        return SchemaState.AT_HEAD, current, head
    if current is None:
        return SchemaState.BEHIND, current, head
    try:
        script.get_revision(current)
    except CommandError:  # alembic: "Can't locate revision"
        return SchemaState.NEWER, current, head
    return SchemaState.BEHIND, current, head


APP_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def ensure_app_role(admin_url: str, name: str, password: str) -> None:
    """The role the services connect as: it may log in, read and write every table and
    sequence of the schema (those made later by the migrating role too), and nothing
    else: no DDL, no other role, no other database. The run history's day partitions are
    made and dropped by the table owner (`cronfleet maintenance` and `db upgrade` connect
    as it). Run after every upgrade: the grants cover the tables it added."""
    if not APP_ROLE_NAME.match(name):
        raise FieldError("name", "lower-case letters, digits and underscores, at most 63")
    if not password:
        raise FieldError("password", "must not be empty")
    import psycopg
    from psycopg import sql

    url = make_url(admin_url)
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    role = sql.Identifier(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        conn.execute(
            sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(role, sql.Literal(password))
        )
        # only a superuser may set NOSUPERUSER: a role that has more rights is refused
        extra = conn.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, rolbypassrls FROM pg_roles"
            " WHERE rolname = %s",
            (name,),
        ).fetchone()
        if extra is None or any(extra):
            raise FieldError("name", f"role {name} may do more than a service needs: drop it")
        database = sql.Identifier(conn.info.dbname)
        for grant in (
            "GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {role}",
            "GRANT USAGE ON SCHEMA public TO {role}",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
            "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {role}",
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public"
            " GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}",
            "ALTER DEFAULT PRIVILEGES IN SCHEMA public"
            " GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {role}",
        ):
            conn.execute(sql.SQL(grant).format(db=database, role=role))
