"""The stack's PostgreSQL: Debian's server binaries, a data directory of our own.

We never touch a Debian cluster (`pg_lsclusters`); we run `initdb`/`pg_ctl` on
$CRONFLEET_HOME/postgres/data as the `postgres` system user, because the server
refuses to run as root, which is how this kit is run on CI.

The role's password is drawn at random on the first `up` and kept in
$CRONFLEET_HOME/postgres.password (mode 0600, like stack.env): a well-known one would
let any local process, a tenant's command among them, log in on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kit.settings import cronfleet_home
from kit.stack.private import secure_home
from kit.stack.process import (
    StackError,
    alive,
    choose_port,
    load_state,
    log_tail,
    progress,
    read_pid,
    save_state,
    start_again_on_bind_race,
    wait_until,
)

PREFERRED_PORT = 55432
START_TIMEOUT_S = 60
ROLE = DATABASE = "cronfleet"
SERVER_CONF = """# written by `cronfleet stack up` on every start; edits are overwritten
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{socket_dir}'
max_connections = 200
shared_buffers = 256MB
"""


@dataclass(frozen=True)
class Postgres:
    """Where one of the stack's PostgreSQL clusters lives; paths only, state is on disk.

    The home shard is `postgres/` on port 55432; `stack up --shards N` adds clusters
    `postgres-shard1/` ... on the ports above it (docs/shards.md). They share the role's
    password file: one stack, one secret.
    """

    root: Path
    port_key: str = "postgres_port"  # its port's name in the stack's state file
    preferred_port: int = PREFERRED_PORT

    @classmethod
    def default(cls) -> Postgres:
        return cls(cronfleet_home() / "postgres")

    @classmethod
    def shard(cls, number: int) -> Postgres:
        """Shard `number` of the local stack; 0 is the home shard (`default()`)."""
        if number < 0:
            raise ValueError("a shard's number must not be negative")
        if number == 0:
            return cls.default()
        return cls(
            cronfleet_home() / f"postgres-shard{number}",
            port_key=f"postgres_shard{number}_port",
            preferred_port=PREFERRED_PORT + number,
        )

    @property
    def name(self) -> str:
        """What progress lines and errors call it: `postgres`, `postgres-shard1`, ..."""
        return self.root.name

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    @property
    def port(self) -> int:
        return load_state().get(self.port_key, self.preferred_port)

    @property
    def socket_dir(self) -> Path:
        # unix socket paths are limited to ~107 bytes; fall back to the temp dir
        own = self.root / "run"
        return own if len(str(own)) < 90 else Path(tempfile.gettempdir())

    @property
    def password_file(self) -> Path:
        return self.root.parent / "postgres.password"

    def password(self) -> str:
        """The role's password: drawn once, then read back (URL-safe characters only)."""
        path = self.password_file
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_private(path, secrets.token_urlsafe(24) + "\n")
        return path.read_text().strip()

    def url(self) -> str:
        password = self.password()
        return f"postgresql+psycopg://{ROLE}:{password}@127.0.0.1:{self.port}/{DATABASE}"

    def pid(self) -> int | None:
        """The postmaster's pid when it runs on our data directory, else None."""
        pid = read_pid(self.data / "postmaster.pid")
        return pid if pid is not None and alive(pid, "postgres") else None

    def answers(self, timeout_s: int = 2) -> bool:
        import psycopg

        try:
            with psycopg.connect(
                host="127.0.0.1",
                port=self.port,
                user=ROLE,
                password=self.password(),
                dbname=DATABASE,
                connect_timeout=timeout_s,
            ) as conn:
                conn.execute("select 1")
        except psycopg.Error:
            return False
        return True

    # --- up ----------------------------------------------------------------------------

    def up(self) -> None:
        bin_dir = server_bin_dir()
        if self.pid() is not None:
            if self.answers():
                progress(f"{self.name}: already running on 127.0.0.1:{self.port}")
                self._ensure_role_and_database(bin_dir)  # cheap, and heals an older setup
                return
            progress(f"{self.name}: running but not answering yet; waiting")
        else:
            self._prepare(bin_dir)
            self._start(bin_dir)
        self._ensure_role_and_database(bin_dir)
        if not wait_until(self.answers, START_TIMEOUT_S):
            raise StackError(f"{self.name}: does not accept connections as {ROLE}; see {self.log}")

    def _prepare(self, bin_dir: Path) -> None:
        user = postgres_user()
        self.root.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        for path in (self.root, self.socket_dir):
            if path != Path(tempfile.gettempdir()):
                os.chown(path, user.pw_uid, user.pw_gid)
                path.chmod(0o700)
        secure_home(self.root.parent)  # installed now: the postgres group may pass
        make_traversable(self.root.parent.parent, user)
        if not (self.data / "PG_VERSION").exists():
            progress(f"{self.name}: initialising {self.data}")
            as_postgres(
                bin_dir / "initdb",
                "-D", str(self.data), "-U", "postgres", "-E", "UTF8", "--no-locale",
                "--auth-local=peer", "--auth-host=scram-sha-256",
            )  # fmt: skip
            with (self.data / "postgresql.conf").open("a") as conf:
                conf.write("\ninclude_if_exists = 'cronfleet.conf'\n")
        made_by = (self.data / "PG_VERSION").read_text().strip()
        if made_by != bin_dir.parent.name:
            raise StackError(
                f"{self.name}: {self.data} was made by PostgreSQL {made_by} but the newest server "
                f"here is {bin_dir.parent.name}; run `cronfleet stack down` and remove {self.root}"
            )
        # a postmaster.pid whose process is gone would make pg_ctl refuse to start
        with contextlib.suppress(FileNotFoundError):
            if self.pid() is None:
                (self.data / "postmaster.pid").unlink()

    def _start(self, bin_dir: Path) -> None:
        start_again_on_bind_race(self.name, self.log, lambda: self._start_once(bin_dir))

    def _start_once(self, bin_dir: Path) -> None:
        port = choose_port(self.port, self.name)
        save_state(**{self.port_key: port})
        conf = self.data / "cronfleet.conf"
        conf.write_text(SERVER_CONF.format(port=port, socket_dir=self.socket_dir))
        user = postgres_user()
        os.chown(conf, user.pw_uid, user.pw_gid)
        progress(f"{self.name}: starting PostgreSQL {bin_dir.parent.name} on 127.0.0.1:{port}")
        try:
            as_postgres(
                bin_dir / "pg_ctl",
                "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(START_TIMEOUT_S),
                "start",
            )  # fmt: skip
        except StackError as exc:
            raise StackError(f"{exc}; log tail:\n{log_tail(self.log)}") from None

    def _ensure_role_and_database(self, bin_dir: Path) -> None:
        """Idempotent: the role and the database exist, the password is ours."""
        password = self.password()  # URL-safe base64: nothing to quote
        role_sql = (
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN "
            f"CREATE ROLE {ROLE} LOGIN CREATEDB PASSWORD '{password}'; ELSE "
            f"ALTER ROLE {ROLE} LOGIN CREATEDB PASSWORD '{password}'; END IF; END $$;"
        )
        self._psql(bin_dir, role_sql)
        # Tests drop their databases WITH (FORCE); a straggling backend of another role
        # (a benchmark's, an operator's psql) must not make that fail.
        self._psql(bin_dir, f"GRANT pg_signal_backend TO {ROLE}")
        exists = self._psql(bin_dir, f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'")
        if exists.strip() != "1":
            self._psql(bin_dir, f"CREATE DATABASE {DATABASE} OWNER {ROLE}")

    def superuser_sql(self, sql: str) -> str:
        """SQL as the cluster's superuser over its socket, for what the kit's role may not
        do (ALTER SYSTEM, CHECKPOINT): benchmarks of the server's settings on this stack."""
        return self._psql(server_bin_dir(install=False), sql)

    def _psql(self, bin_dir: Path, sql: str) -> str:
        """Run SQL given on stdin, not argv: a password in argv shows in `ps`."""
        return as_postgres(
            bin_dir / "psql",
            "-h", str(self.socket_dir), "-p", str(self.port), "-d", "postgres",
            "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-f", "-",
            stdin=sql,
        )  # fmt: skip

    # --- down --------------------------------------------------------------------------

    def down(self) -> None:
        pid = self.pid()
        if pid is None:
            progress(f"{self.name}: not running")
            return
        bin_dir = server_bin_dir(install=False)
        progress(f"{self.name}: stopping (pid {pid})")
        for mode in ("fast", "immediate"):
            with contextlib.suppress(StackError):
                as_postgres(bin_dir / "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30",
                            "stop")  # fmt: skip
            if self.pid() is None:
                return
        raise StackError(f"{self.name}: pid {pid} did not stop; see {self.log}")


# --- the Debian server ----------------------------------------------------------------------


def server_bin_dir(install: bool = True) -> Path:
    """The newest /usr/lib/postgresql/<major>/bin, installing the package when none is there."""
    found = _newest_server()
    if found is None and install:
        _apt_install_postgresql()
        found = _newest_server()
    if found is None:
        raise StackError("postgres: no server under /usr/lib/postgresql/*/bin after install")
    return found


def _newest_server() -> Path | None:
    candidates = [
        p.parent
        for p in Path("/usr/lib/postgresql").glob("*/bin/postgres")
        if p.parent.parent.name.isdigit()
    ]
    return max(candidates, key=lambda p: int(p.parent.name), default=None)


def _apt_install_postgresql() -> None:
    log = cronfleet_home() / "apt.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    steps = (
        ("apt-get update", ["apt-get", "update", "-q"]),
        ("apt-get install postgresql", ["apt-get", "install", "-y", "-q", "postgresql"]),
    )
    progress(f"postgres: not installed; installing with apt-get (log: {log})")
    with log.open("a") as out:
        for name, cmd in steps:
            progress(f"postgres: {name} ...")
            try:
                done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
            except FileNotFoundError:
                raise StackError("postgres: not installed and apt-get is not available") from None
            if done.returncode != 0:
                last = log_tail(log, 1).strip()
                raise StackError(f"postgres: `{name}` failed (exit {done.returncode}): {last}")


def postgres_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise StackError("postgres: system user `postgres` missing (package broken?)") from None


def as_postgres(program: Path, *args: str, stdin: str | None = None) -> str:
    """Run a server tool as the `postgres` user (it refuses root); one-line error on failure."""
    cmd = [str(program), *args]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd="/", input=stdin)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        reason = detail[-1] if detail else f"exit {done.returncode}"
        raise StackError(f"postgres: {program.name} failed: {reason}")
    return done.stdout


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (0600), whatever the umask, atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def make_traversable(path: Path, user: pwd.struct_passwd) -> None:
    """Let `postgres` search `path` and its parents where it cannot yet (others' search
    permission added), so it reaches its data directory under e.g. /root/.cronfleet; read
    permission is not granted. Only where PostgreSQL runs as another user than ours."""
    if user.pw_uid == os.geteuid():
        return
    for directory in (path, *path.parents):
        st = directory.stat()
        passes = (
            st.st_mode & stat.S_IXOTH
            or (st.st_uid == user.pw_uid and st.st_mode & stat.S_IXUSR)
            or (st.st_gid == user.pw_gid and st.st_mode & stat.S_IXGRP)
        )
        if not passes:
            progress(f"postgres: allowing others to traverse {directory} (chmod o+x)")
            directory.chmod(stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
