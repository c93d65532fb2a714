"""The deployment tests' database (owned by a stand-in for RDS's master user) and release
(the wheel scripts/release.sh builds), shared by the bootstrap and chaos-target tests."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.local_fleet import build_release, superuser_sql


@dataclass(frozen=True)
class Database:
    name: str
    owner: tuple[str, str]  # RDS's master user: may create roles, is no superuser
    app_user: str


@pytest.fixture
def database() -> Iterator[Database]:
    """An EMPTY database (the api machine's bootstrap migrates it, as at deploy), owned by a
    role that stands for RDS's master user (LOGIN CREATEROLE, not superuser), and the name
    of the services' role; all dropped afterwards (roles are the server's)."""
    tag = f"{os.getpid()}"
    owner = (f"cf_owner_{tag}", secrets.token_hex(16))
    db = Database(f"cf_it_{tag}_bootstrap", owner, f"cf_app_{tag}")
    drop = (
        f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE);\n'
        f'DROP ROLE IF EXISTS "{db.app_user}";\nDROP ROLE IF EXISTS "{db.owner[0]}";\n'
    )
    try:
        superuser_sql(drop)
        superuser_sql(
            f"CREATE ROLE \"{db.owner[0]}\" LOGIN CREATEROLE PASSWORD '{db.owner[1]}';\n"
            f'CREATE DATABASE "{db.name}" OWNER "{db.owner[0]}";\n'
        )
    except Exception as exc:
        pytest.fail(f"the local stack is not up (cronfleet stack up): {exc}", pytrace=False)
    yield db
    superuser_sql(drop)


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """cronfleet as the machines install it: `scripts/release.sh --worktree`'s wheel and
    the SHA-256 it stated."""
    return build_release(tmp_path_factory.mktemp("dist"))
