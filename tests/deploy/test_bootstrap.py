"""The part of `terraform apply` that can run here: the fleet's bootstrap, rendered from the
fleet module's template exactly as templatefile() renders it, EXECUTED on this machine
against the local stack, once per role (api, scheduler, worker, reaper) as four fresh
"machines" (own prefix, config and state directories, clean environment). Together they
must run a job created over HTTP to success.

What differs from EC2, and is not covered here: the script runs with
CRONFLEET_BOOTSTRAP_INIT=foreground (no systemd: it execs the unit's ExecStart command
instead of starting the unit; the units are written and, where systemd-analyze exists,
verified), as the test's user rather than a `cronfleet` system user, with `aws` answered by
a stand-in that plays Secrets Manager (the real call's arguments are checked), without
TLS to the local PostgreSQL (sslmode=prefer; the module only allows require/verify-*),
and without dnf (python3.11 is already here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from kit.settings import load_settings
from tests.deploy.terraform_files import (
    BOOTSTRAP,
    MODULES,
    ROOT,
    locals_of,
    render,
    template_variables,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROLES = ("api", "scheduler", "worker", "reaper")
SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!db-test"
DEADLINE_S = 240.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, check, deadline_s: float, procs: list[Machine] = ()) -> None:
    """Poll `check` until true; fail with the machines' logs when the deadline passes or
    one of them died."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return
        dead = [m for m in procs if m.proc.poll() is not None]
        if dead:
            pytest.fail(f"{what}: machine {dead[0].role} exited\n{_logs(procs)}")
        time.sleep(0.5)
    pytest.fail(f"{what}: not within {deadline_s} s\n{_logs(procs)}")


def _logs(machines) -> str:
    return "\n".join(f"--- {m.role} ---\n{m.log.read_text()[-4000:]}" for m in machines)


@dataclass
class Machine:
    role: str
    root: Path
    script: str
    env: dict[str, str]
    log: Path = field(init=False)
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.log = self.root / "bootstrap.log"

    def boot(self) -> None:
        (self.root / "user-data.sh").write_text(self.script)
        self.proc = subprocess.Popen(
            ["bash", str(self.root / "user-data.sh")],
            env=self.env,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture
def database() -> Iterator[str]:
    """An EMPTY database: the api machine's bootstrap migrates it, as at deploy."""
    base = load_settings().database_url
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    name = f"cf_it_{os.getpid()}_bootstrap"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        pytest.fail(f"the local stack is not up (cronfleet stack up): {exc}", pytrace=False)
    yield name
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cronfleet as the machines install it: a wheel built from this tree's files (tracked
    and new, not ignored), copied first: a build in place would reuse `build/`, which
    keeps files the tree has since renamed (a migration renumbered: two alembic heads)."""
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("src")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        check=True,
        timeout=300,
    )
    (whl,) = out.glob("cronfleet-*.whl")
    return whl


def _fake_aws(bin_dir: Path, secret: dict[str, str]) -> None:
    """`aws` answering the one call the bootstrap makes, the way Secrets Manager answers it
    (`--query SecretString --output text`: the secret's JSON). Anything else fails."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "aws"
    script.write_text(
        "#!/bin/sh\n"
        f'expected="secretsmanager get-secret-value --region eu-west-1 --secret-id {SECRET_ARN}'
        ' --query SecretString --output text"\n'
        'if [ "$*" = "$expected" ]; then\n'
        f"  cat <<'JSON'\n{json.dumps(secret)}\nJSON\n"
        "  exit 0\nfi\n"
        'echo "aws stand-in: unexpected call: $*" >&2\nexit 254\n'
    )
    script.chmod(0o755)


def _values(
    role: str,
    root: Path,
    wheel: Path,
    db: dict[str, str],
    ports: dict[str, int],
    prefix: str,
    settings_env: str,
) -> dict[str, object]:
    return {
        "role": role,
        "prefix": str(root / "opt"),
        "config_dir": str(root / "etc"),
        "state_dir": str(root / "var"),
        "unit_dir": str(root / "systemd"),
        "python": sys.executable,
        "cronfleet_package": str(wheel),
        "pip_index_url": "",
        "aws_region": "eu-west-1",
        "db_secret_arn": SECRET_ARN,
        "db_host": db["host"],
        "db_port": int(db["port"]),
        "db_name": db["name"],
        "db_sslmode": "prefer",
        "run_topic_prefix": prefix,
        "metrics_port": ports[role],
        "api_port": ports["api"],
        "drain_s": 5,
        "migrate_wait_s": 180,
        "settings_env": settings_env,
    }


def test_every_template_variable_is_supplied_by_the_module() -> None:
    """templatefile() fails on a missing key: the module's map must cover the template."""
    supplied = set(locals_of(MODULES / "fleet")["bootstrap_vars"]) | {"role"}
    assert template_variables(BOOTSTRAP.read_text()) == supplied
    main_tf = (MODULES / "fleet" / "main.tf").read_text()
    assert "merge(local.bootstrap_vars, { role = each.key })" in main_tf


def test_rendered_bootstrap_runs_a_job_end_to_end(tmp_path: Path, database: str, wheel: Path):
    stack = load_settings()
    url = make_url(stack.database_url)
    secret = {"username": url.username, "password": url.password, "engine": "postgres"}
    db = {"host": url.host, "port": str(url.port), "name": database}
    prefix = f"cf.boot.{os.getpid()}.{uuid.uuid4().hex[:6]}"
    ports = {
        "api": _free_port(),
        "scheduler": _free_port(),
        "worker": _free_port(),
        "reaper": _free_port(),
    }
    kit_settings = {  # what the module's local.kit_settings passes, at this stack's size
        "CRONFLEET_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "CRONFLEET_PARTITIONS": "64",
        "CRONFLEET_RUN_TOPIC_PARTITIONS": "2",
        "CRONFLEET_RUN_TOPIC_REPLICATION": "1",
        "CRONFLEET_RUN_TOPIC_MIN_INSYNC": "1",
        "CRONFLEET_WORKER_CONCURRENCY": "4",
        "CRONFLEET_API_PORT": str(ports["api"]),
    }
    settings_env = "\n".join(f"{k}='{kit_settings[k]}'" for k in sorted(kit_settings))
    fake_bin = tmp_path / "fake-bin"
    _fake_aws(fake_bin, secret)

    template = BOOTSTRAP.read_text()
    machines = []
    for role in ROLES:
        root = tmp_path / role
        root.mkdir()
        script = render(template, _values(role, root, wheel, db, ports, prefix, settings_env))
        # no credentials in user data: the URL is built on the machine from the secret
        assert not re.search(r"postgresql\+psycopg://[^\s'\"{]*:[^\s'\"{]*@", script), role
        assert SECRET_ARN in script and "secretsmanager get-secret-value" in script
        assert len(script.encode()) < 16 * 1024, "EC2 user data is limited to 16 KB"
        env = {
            "PATH": f"{fake_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(root),
            "CRONFLEET_BOOTSTRAP_INIT": "foreground",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        machines.append(Machine(role, root, script, env))
    by_role = {m.role: m for m in machines}
    try:
        for m in machines:  # the api first: it migrates; the others wait for the schema
            m.boot()
        api = f"http://127.0.0.1:{ports['api']}"

        def api_up() -> bool:
            try:
                return httpx.get(f"{api}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        _wait("api healthy", api_up, DEADLINE_S, machines)
        for role in ("scheduler", "worker", "reaper"):
            port = ports[role]
            _wait(
                f"{role} metrics",
                lambda p=port: _answers(f"http://127.0.0.1:{p}/metrics"),
                DEADLINE_S,
                machines,
            )

        # what an operator does on a machine: the wrapper carries settings and secrets
        api_root = by_role["api"].root
        token = (
            subprocess.run(
                [
                    str(api_root / "opt/bin/cronfleet-env"),
                    "cronfleet",
                    "tokens",
                    "create",
                    "--tenant",
                    "acme",
                    "--scope",
                    "read",
                    "--scope",
                    "write",
                ],
                env=by_role["api"].env,
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        headers = {"Authorization": f"Bearer {token}"}
        at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
        created = httpx.post(
            f"{api}/v1/jobs",
            headers=headers,
            json={
                "name": "bootstrap-e2e",
                "schedule": {"at": at.isoformat()},
                "task": {"type": "noop"},
            },
            timeout=10,
        )
        assert created.status_code == 201, created.text
        job_id = created.json()["job_id"]
        runs: list[dict] = []

        def succeeded() -> bool:
            nonlocal runs
            r = httpx.get(f"{api}/v1/jobs/{job_id}/runs", headers=headers, timeout=5)
            runs = r.json()["runs"] if r.status_code == 200 else []
            return any(run["status"] == "succeeded" for run in runs)

        _wait("the job's run succeeded", succeeded, 60, machines)
        run = next(run for run in runs if run["status"] == "succeeded")
        assert run["started_at"] and run["finished_at"]

        for m in machines:
            # the health check the systemd timer runs answers for every role
            health = subprocess.run(
                [str(m.root / "opt/bin/cronfleet-health")],
                env=m.env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert health.returncode == 0, f"{m.role}: {health.stderr}"
            # secrets stay root-only (0600 here; 0640 group cronfleet under systemd)
            secrets_env = m.root / "etc/secrets.env"
            mode = stat.S_IMODE(secrets_env.stat().st_mode)
            assert mode == 0o600, f"{m.role}: secrets.env mode {oct(mode)}"
            assert f"/{database}?sslmode=prefer'" in secrets_env.read_text()
            # the process running is the unit's ExecStart, word for word: the bootstrap
            # exec'd cronfleet-env, which exec'd the cronfleet console script (same pid)
            unit = (m.root / f"systemd/cronfleet-{m.role}.service").read_text()
            exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
            wrapper, program, *args = exec_start.removeprefix("ExecStart=").split()
            assert wrapper == str(m.root / "opt/bin/cronfleet-env") and program == "cronfleet"
            cmdline = _service_cmdline(m.proc.pid)
            assert cmdline[-len(args) :] == args, (exec_start, cmdline)
            assert cmdline[-len(args) - 1].endswith("/opt/bin/cronfleet"), cmdline
        _verify_units([m.root / "systemd" for m in machines])
        _only_the_kit_installed(by_role["worker"])
    finally:
        for m in reversed(machines):
            m.stop()
        _delete_topics(stack.kafka_bootstrap, prefix)


def _only_the_kit_installed(machine: Machine) -> None:
    """The machine's venv holds the kit and what its services need: the model's, the
    drills' and the load tests' libraries are extras, and their commands say so."""
    venv = machine.root / "opt"
    listed = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "cronfleet" in installed
    assert installed.isdisjoint({"simpy", "numpy", "matplotlib", "rich", "locust"}), installed
    sim = subprocess.run(
        [str(venv / "bin/cronfleet"), "sim", "top-of-hour"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(machine.root)},
    )
    assert sim.returncode == 2 and "pip install 'cronfleet[sim]'" in sim.stderr, sim.stderr


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _service_cmdline(pid: int) -> list[str]:
    """The bootstrap exec'd cronfleet-env, which exec'd cronfleet: same pid, new argv."""
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [a.decode() for a in raw.split(b"\0") if a]


def _verify_units(dirs: list[Path]) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return  # stated in the module docstring: not every machine has systemd's tools
    for d in dirs:
        units = sorted(str(p) for p in d.iterdir())
        out = subprocess.run([tool, "verify", *units], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert not [line for line in out.stderr.splitlines() if "cronfleet" in line], out.stderr


def _delete_topics(bootstrap: str, prefix: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
    for future in admin.delete_topics(topics, operation_timeout=30).values() if topics else []:
        future.result()
