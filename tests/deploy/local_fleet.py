"""The fleet module's machines, on this machine: the bootstrap rendered from the module's
template exactly as templatefile() renders it, once per role the module declares, each
run as a fresh "machine" (own prefix, config and state directories, clean environment)
against the local stack.

What differs from EC2 (and is not covered here): the script runs with
CRONFLEET_BOOTSTRAP_INIT=foreground (no systemd: it runs the unit's ExecStartPre commands
and execs its ExecStart command instead of starting the unit; the units are written and,
where systemd-analyze exists, verified), as the test's user rather than a `cronfleet`
system user, with `aws` answered by a stand-in that plays S3 and Secrets Manager (each
call's arguments checked as the real CLI takes them), without TLS to the local PostgreSQL
(sslmode=prefer; the module only allows require/verify-*), and without dnf.

Each machine is started by its own `boot.sh` (detached, its pid in `machine.pid`), so a
chaos drill's target file can stop and start it with a shell command, as it would with
`aws ec2 stop-instances` (tests/deploy/test_chaos_target.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy.engine import make_url

from kit.settings import load_settings
from kit.stack.process import running
from tests.deploy.terraform_files import BOOTSTRAP, MODULES, ROOT, locals_of, render

REGION = "eu-west-1"
ADMIN_SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!db-test"
APP_SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cronfleet-app-test"
BUCKET = "cronfleet-release-test"


def fleet_roles() -> list[str]:
    """Every role the fleet module declares (local.roles), api first: it migrates."""
    roles = list(locals_of(MODULES / "fleet")["roles"])
    return sorted(roles, key=lambda r: (r != "api", r))


def free_ports(count: int) -> list[int]:
    """Distinct free ports below the kernel's ephemeral range, so that no client's outgoing
    connection takes one between this choice and the service's bind."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    found: list[int] = []
    for _ in range(1000):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in found:
            found.append(port)
        if len(found) == count:
            return found
    raise RuntimeError("no free ports")


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def build_release(out: Path) -> tuple[Path, str]:
    """The release artefact as `scripts/release.sh` makes it (from the work tree's files):
    the wheel and the SHA-256 its .sha256 file states."""
    subprocess.run(
        ["bash", str(ROOT / "scripts/release.sh"), "--worktree", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = out.glob("cronfleet-*-py3-none-any.whl")
    stated = (out / f"{wheel.name}.sha256").read_text().split()
    assert stated[1] == wheel.name
    assert stated[0] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    return wheel, stated[0]


_FAKE_AWS = r'''#!{python}
"""`aws` as the bootstrap calls it: S3 and Secrets Manager, from files under {state!r}.
Any other call (or the same call with other arguments) fails as the CLI does."""
import hashlib, json, os, shutil, sys

STATE = {state!r}
REGION = {region!r}
args = sys.argv[1:]


def secret_path(arn):
    return os.path.join(STATE, "secrets", hashlib.sha1(arn.encode()).hexdigest() + ".json")


def fail(why):
    print(f"aws stand-in: {{why}}: {{' '.join(args)}}", file=sys.stderr)
    sys.exit(254)


if args[:2] == ["s3", "cp"] and args[2:5] == ["--region", REGION, "--only-show-errors"]:
    src, dst = args[5:7]
    if not src.startswith("s3://") or len(args) != 7:
        fail("unexpected s3 call")
    path = os.path.join(STATE, "s3", src[len("s3://"):])
    if not os.path.exists(path):
        fail("NoSuchKey")
    shutil.copyfile(path, dst)
elif args[:3] == ["secretsmanager", "get-secret-value", "--region"] and args[3] == REGION:
    rest = args[4:]
    if len(rest) != 6 or rest[0] != "--secret-id" or rest[2:] != [
        "--query", "SecretString", "--output", "text"
    ]:
        fail("unexpected secretsmanager call")
    try:
        with open(secret_path(rest[1])) as f:
            print(f.read())
    except FileNotFoundError:
        fail("ResourceNotFoundException")
elif args[:3] == ["secretsmanager", "put-secret-value", "--region"] and args[3] == REGION:
    rest = args[4:]
    if len(rest) != 4 or rest[0] != "--secret-id" or rest[2] != "--secret-string":
        fail("unexpected secretsmanager call")
    if not rest[3].startswith("file://"):
        fail("the secret on the command line (visible in ps)")
    if not os.path.exists(secret_path(rest[1])):
        fail("ResourceNotFoundException")
    with open(rest[3][len("file://"):]) as f:
        value = json.load(f)
    with open(secret_path(rest[1]), "w") as f:
        json.dump(value, f)
    print(json.dumps({{"ARN": rest[1]}}))
else:
    fail("unexpected call")
'''


@dataclass
class FakeAws:
    """S3 and Secrets Manager as files; `bin` goes first on the machines' PATH."""

    root: Path

    def __post_init__(self) -> None:
        self.bin = self.root / "bin"
        for d in (self.bin, self.root / "secrets", self.root / "s3"):
            d.mkdir(parents=True, exist_ok=True)
        script = self.bin / "aws"
        text = _FAKE_AWS.format(python=sys.executable, state=str(self.root), region=REGION)
        script.write_text(text)
        script.chmod(0o755)

    def _secret_path(self, arn: str) -> Path:
        return self.root / "secrets" / (hashlib.sha1(arn.encode()).hexdigest() + ".json")

    def put_secret(self, arn: str, value: dict[str, str]) -> None:
        self._secret_path(arn).write_text(json.dumps(value))

    def secret(self, arn: str) -> dict[str, str]:
        return json.loads(self._secret_path(arn).read_text())

    def put_object(self, bucket: str, key: str, source: Path) -> None:
        dst = self.root / "s3" / bucket / key
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(source.read_bytes())


_KILL_TREE = """import os, signal, sys
from pathlib import Path

root = int(Path(sys.argv[1]).read_text())
children = {}
for entry in Path("/proc").iterdir():
    if entry.name.isdigit():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat[stat.rfind(")") + 2 :].split()[1]), []).append(int(entry.name))
todo, tree = [root], []
while todo:
    pid = todo.pop()
    tree.append(pid)
    todo += children.get(pid, [])
for pid in tree:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


@dataclass
class Machine:
    role: str
    root: Path
    script: str
    env: dict[str, str]

    @property
    def log(self) -> Path:
        return self.root / "bootstrap.log"

    @property
    def boot_script(self) -> Path:
        return self.root / "boot.sh"

    @property
    def pid_file(self) -> Path:
        return self.root / "machine.pid"

    @property
    def stop_script(self) -> Path:
        return self.root / "stop.sh"

    def write(self) -> None:
        (self.root / "user-data.sh").write_text(self.script)
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        self.boot_script.write_text(
            "#!/bin/sh\n# boot this machine: its user data, detached, its pid in machine.pid\n"
            f"cd {shlex.quote(str(self.root))}\n"
            f"env -i {env} setsid bash user-data.sh >>bootstrap.log 2>&1 </dev/null &\n"
            "echo $! >machine.pid\n"
        )
        self.boot_script.chmod(0o755)
        self.stop_script.write_text(
            "#!/bin/sh\n# stop this machine as a power-off does: SIGKILL to its bootstrap's\n"
            "# process and everything below it (the service, the tasks it runs)\n"
            f"exec {sys.executable} - {shlex.quote(str(self.pid_file))} <<'PY'\n"
            f"{_KILL_TREE}PY\n"
        )
        self.stop_script.chmod(0o755)

    def boot(self) -> None:
        subprocess.run([str(self.boot_script)], check=True, timeout=30)

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        pid = self.pid()
        return pid is not None and running(pid)

    def stop(self, sig: int = signal.SIGTERM, wait_s: float = 30.0) -> None:
        pid = self.pid()
        if pid is None or not self.alive():
            return
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + wait_s
        while self.alive() and time.monotonic() < end:
            time.sleep(0.2)
        if self.alive():
            os.killpg(pid, signal.SIGKILL)

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text()[-chars:]
        except OSError:
            return ""


@dataclass
class LocalFleet:
    """Every role of the fleet module as a machine here, one database, one app role."""

    root: Path
    database: str
    owner: tuple[str, str]  # the database's owner, RDS's master user: (name, password)
    app_user: str
    wheel: Path
    sha256: str
    task_policy: str = ""
    tenant_policy: str = ""
    run_as_users: tuple[str, ...] = ()
    roles: list[str] = field(default_factory=fleet_roles)
    extra_settings: dict[str, str] = field(default_factory=dict)
    machines: dict[str, Machine] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stack = load_settings()
        url = make_url(self.stack.database_url)
        self.admin = {"username": self.owner[0], "password": self.owner[1], "engine": "postgres"}
        self.db = {"host": url.host, "port": str(url.port), "name": self.database}
        tag = hashlib.sha1(str(self.root).encode()).hexdigest()[:6]
        # not `cf.` or `cf_`: the integration suite's sweep deletes those it sees appear
        self.prefix = f"cfdeploy.{os.getpid()}.{tag}"
        self.group = f"cfdeploy-{os.getpid()}-{tag}"
        names = sorted({*self.roles, "api"})
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.aws = FakeAws(self.root / "aws")
        self.aws.put_secret(ADMIN_SECRET_ARN, self.admin)
        # what the database module's aws_secretsmanager_secret_version.app starts with
        self.aws.put_secret(APP_SECRET_ARN, {"username": self.app_user, "password": ""})
        self.key = f"wheels/{self.sha256}/{self.wheel.name}"
        self.aws.put_object(BUCKET, self.key, self.wheel)
        template = BOOTSTRAP.read_text()
        for role in self.roles:
            root = self.root / role
            root.mkdir(parents=True, exist_ok=True)
            env = {
                "PATH": f"{self.aws.bin}:/usr/local/bin:/usr/bin:/bin",
                "HOME": str(root),
                "CRONFLEET_BOOTSTRAP_INIT": "foreground",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                # one download cache for every machine (each has its own HOME)
                "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR")
                or str(Path.home() / ".cache" / "pip"),
            }
            m = Machine(role, root, render(template, self.values(role)), env)
            m.write()
            self.machines[role] = m

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    def owner_url(self) -> str:
        """The database as its owner (what an operator with the master secret reaches)."""
        url = make_url(self.stack.database_url)
        user, password = self.owner
        return url.set(username=user, password=password, database=self.database).render_as_string(
            hide_password=False
        )

    def kit_settings(self) -> dict[str, str]:
        """What the module's local.kit_settings passes, at this stack's size."""
        return {
            "CRONFLEET_KAFKA_BOOTSTRAP": self.stack.kafka_bootstrap,
            "CRONFLEET_PARTITIONS": "64",
            "CRONFLEET_RUN_TOPIC_PARTITIONS": "2",
            "CRONFLEET_RUN_TOPIC_REPLICATION": "1",
            "CRONFLEET_RUN_TOPIC_MIN_INSYNC": "1",
            "CRONFLEET_WORKER_CONCURRENCY": "4",
            "CRONFLEET_API_PORT": str(self.ports["api"]),
            # a group of its own: the shared broker's other tests use the default one
            "CRONFLEET_WORKER_GROUP": self.group,
            **self.extra_settings,
        }

    def values(self, role: str, **override: object) -> dict[str, object]:
        """The module's local.bootstrap_vars with this machine's directories and ports."""
        root = self.root / role
        settings = self.kit_settings()
        values: dict[str, object] = {
            "role": role,
            "prefix": str(root / "opt"),
            "config_dir": str(root / "etc"),
            "state_dir": str(root / "var"),
            "unit_dir": str(root / "systemd"),
            "python": sys.executable,
            "wheel_url": f"s3://{BUCKET}/{self.key}",
            "wheel_sha256": self.sha256,
            "pip_index_url": "",
            "aws_region": REGION,
            "db_admin_secret_arn": ADMIN_SECRET_ARN,
            "db_app_secret_arn": APP_SECRET_ARN,
            "db_app_user": self.app_user,
            "db_host": self.db["host"],
            "db_port": int(self.db["port"]),
            "db_name": self.db["name"],
            "db_sslmode": "prefer",
            "run_topic_prefix": self.prefix,
            "metrics_port": self.ports[role],
            "api_port": self.ports["api"],
            "drain_s": 5,
            "migrate_wait_s": 180,
            "settings_env": "\n".join(f"{k}='{settings[k]}'" for k in sorted(settings)),
            "task_policy_b64": _b64(self.task_policy),
            "tenant_policy_b64": _b64(self.tenant_policy),
            "run_as_users": " ".join(self.run_as_users),
        }
        values.update(override)
        return values

    def boot(self, roles: Iterable[str] | None = None) -> None:
        for role in roles or self.roles:
            self.machines[role].boot()

    def health_url(self, role: str) -> str:
        if role == "api":
            return f"{self.api_url}/healthz"
        return f"http://127.0.0.1:{self.ports[role]}/metrics"

    def wait_up(self, deadline_s: float, roles: Iterable[str] | None = None) -> None:
        for role in roles or self.roles:
            self.wait(f"{role} up", lambda r=role: answers(self.health_url(r)), deadline_s)

    def wait(self, what: str, check: Callable[[], bool], deadline_s: float) -> None:
        """Poll `check` until true; AssertionError with the machines' logs when the
        deadline passes or a machine died."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if check():
                return
            dead = [m for m in self.machines.values() if m.pid() and not m.alive()]
            if dead:
                raise AssertionError(f"{what}: machine {dead[0].role} exited\n{self.logs()}")
            time.sleep(0.5)
        raise AssertionError(f"{what}: not within {deadline_s} s\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {m.role} ---\n{m.tail()}" for m in self.machines.values())

    def run(self, role: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A command on a machine as an operator runs it: through cronfleet-env."""
        m = self.machines[role]
        return subprocess.run(
            [str(m.root / "opt/bin/cronfleet-env"), *argv],
            env=m.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def token(self, tenant: str, *scopes: str) -> str:
        args = ["cronfleet", "tokens", "create", "--tenant", tenant]
        for scope in scopes:
            args += ["--scope", scope]
        out = self.run("api", *args)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().splitlines()[-1]

    def boot_here(self, role: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a machine's user data in the foreground, to its end (a boot that fails)."""
        m = self.machines[role]
        return subprocess.run(
            ["bash", str(m.root / "user-data.sh")],
            env=m.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self) -> None:
        for role in reversed(self.roles):
            self.machines[role].stop()

    def delete_topics(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.stack.kafka_bootstrap})
        topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(self.prefix)]
        for future in admin.delete_topics(topics, operation_timeout=30).values() if topics else []:
            future.result()


def superuser_sql(sql: str) -> str:
    """SQL as the local stack's superuser (over its socket), for what only RDS's master user
    may do there: make a role that may create roles, as RDS's master user may."""
    from kit.stack.postgres import Postgres, server_bin_dir

    return Postgres.default()._psql(server_bin_dir(install=False), sql)


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode() if text else ""
