"""A small filesystem of the drill's own under the drills' PostgreSQL: a tmpfs mounted
beside its data directory, made a tablespace, and the drill's database moved onto it
(tables, indexes, and whatever it creates later), so that filling the tmpfs fills the
database's disk and nothing else's. The WAL stays on the data directory's disk: a full
data disk refuses writes (SQLSTATE 53100), where a full WAL disk would stop the server.

Filling is a file of the drill's own written until the filesystem has no byte left;
emptying is removing it. Superuser statements go through the server's own socket as
its OS user (the kit's role may not create a tablespace)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from chaos.stack import ChaosStack

CHUNK = 1 << 20


class SmallFsError(RuntimeError):
    """The small filesystem or its tablespace could not be made (mount refused, ...)."""


@dataclass
class SmallFs:
    stack: ChaosStack
    tag: str  # letters and digits: the mount's and the tablespace's suffix
    size_mb: int = 256

    @property
    def mount(self) -> Path:
        return self.stack.home / "postgres" / f"small-{self.tag}"

    @property
    def space(self) -> str:
        return f"chaos_small_{self.tag}"

    @property
    def filler(self) -> Path:
        return self.mount / "filler"

    def _sql(self, sql: str, database: str = "postgres") -> str:
        from kit.stack.postgres import Postgres, as_postgres, server_bin_dir

        socket_dir = Postgres(self.stack.home / "postgres").socket_dir
        port = make_url(self.stack.database_url).port
        return as_postgres(
            server_bin_dir(install=False) / "psql",
            "-h", str(socket_dir), "-p", str(port), "-d", database,
            "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-f", "-",
            stdin=sql,
        )  # fmt: skip

    def create(self, engine: Engine) -> None:
        """Mount, make the tablespace, move the database onto it."""
        from kit.stack.postgres import postgres_user

        user = postgres_user()
        self.mount.mkdir(parents=True, exist_ok=True)
        options = f"size={self.size_mb}m,uid={user.pw_uid},gid={user.pw_gid},mode=0700"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, f"cfchaos-{self.tag}", str(self.mount)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SmallFsError(f"mount tmpfs on {self.mount}: {done.stderr.strip()}")
        role = make_url(self.stack.database_url).username
        try:
            self._sql(
                f"CREATE TABLESPACE {self.space} LOCATION '{self.mount}'; "
                f"GRANT CREATE ON TABLESPACE {self.space} TO {role};"
            )
        except Exception as exc:
            raise SmallFsError(f"tablespace on {self.mount}: {exc}") from None
        with engine.begin() as conn:
            database = conn.execute(text("SELECT current_database()")).scalar_one()
            conn.execute(text(f'ALTER DATABASE "{database}" SET default_tablespace = {self.space}'))
        self._move(engine, "pg_default", self.space)

    def _move(self, engine: Engine, source: str, target: str) -> None:
        """Every table and index of the database (its owner's) from `source` to `target`;
        partitioned parents keep `target` as their partitions' default."""
        role = make_url(self.stack.database_url).username
        with engine.begin() as conn:
            for kind in ("TABLE", "INDEX"):
                conn.execute(
                    text(f"ALTER {kind} ALL IN TABLESPACE {source} OWNED BY {role} "
                         f"SET TABLESPACE {target}")
                )  # fmt: skip
            parents = conn.execute(
                text(
                    "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_roles r "
                    "ON r.oid = c.relowner WHERE c.relkind = 'p' AND r.rolname = :role"
                ),
                {"role": role},
            ).scalars()
            for parent in list(parents):
                conn.execute(text(f"ALTER TABLE {parent} SET TABLESPACE {target}"))

    def fill(self) -> int:
        """Write the filler until the filesystem is full; the bytes written."""
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (CHUNK, 4096, 512):
                block = b"\0" * size
                while True:
                    try:
                        n = os.write(fd, block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
                    written += n
                    if n < size:
                        break
        finally:
            os.close(fd)
        return written

    def empty(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def free_bytes(self) -> int:
        stat = os.statvfs(self.mount)
        return stat.f_bavail * stat.f_frsize

    def destroy(self, engine: Engine) -> list[str]:
        """Move the database back, drop the tablespace, unmount (whatever of it was made);
        what could not be done."""
        problems: list[str] = []
        if not self.mount.is_mount():
            return problems
        self.empty()
        try:
            with engine.begin() as conn:
                database = conn.execute(text("SELECT current_database()")).scalar_one()
                conn.execute(text(f'ALTER DATABASE "{database}" RESET default_tablespace'))
            self._move(engine, self.space, "pg_default")
        except Exception as exc:
            problems.append(f"moving the database back: {exc}")
        engine.dispose()
        try:
            self._sql(f"DROP TABLESPACE IF EXISTS {self.space}")
        except Exception as exc:
            problems.append(f"dropping tablespace {self.space}: {exc}")
        done = subprocess.run(["umount", str(self.mount)], capture_output=True, text=True)
        if done.returncode != 0:
            problems.append(f"umount {self.mount}: {done.stderr.strip()}")
        else:
            with contextlib.suppress(OSError):
                self.mount.rmdir()
        return problems
