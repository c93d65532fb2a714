"""The part of `terraform apply` that can run here: the fleet's bootstrap, rendered from the
fleet module's template exactly as templatefile() renders it and EXECUTED on this machine
against the local stack, once per role the module declares, as fresh "machines"
(tests/deploy/local_fleet.py says what differs from EC2). They install the release's
wheel from (stand-in) S3 by its SHA-256, the api machine migrates and sets the services'
database role, and together they run a command job created over HTTP to success.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import stat
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.deploy.conftest import Database
from tests.deploy.local_fleet import (
    ADMIN_SECRET_ARN,
    APP_SECRET_ARN,
    LocalFleet,
    answers,
    fleet_roles,
)
from tests.deploy.terraform_files import BOOTSTRAP, MODULES, locals_of, render, template_variables

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE_S = 240.0
POLICY = '[tenants.acme]\ncommands = ["/bin/sh"]\nrun_as = "nobody"\n'


def test_every_template_variable_is_supplied_by_the_module() -> None:
    """templatefile() fails on a missing key: the module's map must cover the template."""
    supplied = set(locals_of(MODULES / "fleet")["bootstrap_vars"]) | {"role"}
    assert template_variables(BOOTSTRAP.read_text()) == supplied
    main_tf = (MODULES / "fleet" / "main.tf").read_text()
    assert "merge(local.bootstrap_vars, { role = each.key })" in main_tf


def test_the_fleet_deploys_every_service_run_all_runs() -> None:
    """A service `cronfleet run-all` starts that the fleet module has no role for is a
    service a deployed fleet lacks (maintenance was one)."""
    from kit.runall import register, services

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    run_all = {s.args[0] for s in services(parser.parse_args(["run-all"]))}
    roles = set(fleet_roles())
    assert run_all <= roles, f"run-all runs {sorted(run_all - roles)}, the fleet module does not"
    template = BOOTSTRAP.read_text()
    for role in roles:  # and the bootstrap knows how to run each
        assert re.search(rf"^  {role}\) CMD=\(cronfleet {role}\b", template, re.M), role


def test_no_default_reaches_for_a_package_by_name() -> None:
    """The machines install the release's wheel by hash, never `cronfleet==...` from an
    index where anyone could register the name."""
    for tf in [*MODULES.glob("*/*.tf"), *MODULES.parent.glob("examples/*/*.tf")]:
        assert "cronfleet==" not in tf.read_text(), tf
    assert "sha256sum" in BOOTSTRAP.read_text()


def test_user_data_fits_ec2s_limit_gzipped() -> None:
    """EC2 takes 16 KB of user data; the module gzips it (base64gzip) and cloud-init
    unpacks it. A long task policy is the operator's to keep short."""
    assert "base64gzip(templatefile(" in (MODULES / "fleet" / "main.tf").read_text()
    fleet = {"task_policy_b64": "x" * 2000}
    values = {name: "v" * 80 for name in template_variables(BOOTSTRAP.read_text())}
    values.update(fleet, settings_env="CRONFLEET_X='1'\n" * 30)
    script = render(BOOTSTRAP.read_text(), values)
    assert len(gzip.compress(script.encode())) * 4 / 3 < 16 * 1024


def test_rendered_bootstrap_runs_a_job_end_to_end(
    tmp_path: Path, database: Database, release: tuple[Path, str]
) -> None:
    db_name, app_user = database.name, database.app_user
    wheel, sha256 = release
    fleet = LocalFleet(
        tmp_path,
        db_name,
        database.owner,
        app_user,
        wheel,
        sha256,
        task_policy=POLICY,
        run_as_users=("nobody",),
    )
    for m in fleet.machines.values():
        # no credentials in user data: the URL is built on the machine from the secrets
        assert not re.search(r"postgresql\+psycopg://[^\s'\"{]*:[^\s'\"{]*@", m.script), m.role
        assert APP_SECRET_ARN in m.script and "secretsmanager" in m.script
    try:
        # the others first: they wait for what only an api machine does (the app role's
        # password, the schema), serving nothing meanwhile
        others = [r for r in fleet.roles if r != "api"]
        fleet.boot(others)
        waits = {
            r: "waiting for the first api machine" if r != "maintenance" else "schema behind"
            for r in others
        }
        fleet.wait(
            "every other machine waiting for the api",
            lambda: all(waits[r] in fleet.machines[r].tail() for r in others),
            DEADLINE_S,
        )
        assert not any(answers(fleet.health_url(r)) for r in others)
        fleet.boot(["api"])
        fleet.wait_up(DEADLINE_S)

        # what an operator does on a machine: the wrapper carries settings and secrets
        token = fleet.token("acme", "read", "write", "command")
        headers = {"Authorization": f"Bearer {token}"}
        at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
        created = httpx.post(
            f"{fleet.api_url}/v1/jobs",
            headers=headers,
            json={
                "name": "bootstrap-e2e",
                "schedule": {"at": at.isoformat()},
                # a command: the task policy the module shipped allows it for acme
                "task": {"type": "command", "argv": ["/bin/sh", "-c", "id -un"]},
            },
            timeout=10,
        )
        assert created.status_code == 201, created.text
        job_id = created.json()["job_id"]
        runs: list[dict] = []

        def succeeded() -> bool:
            nonlocal runs
            r = httpx.get(f"{fleet.api_url}/v1/jobs/{job_id}/runs", headers=headers, timeout=5)
            runs = r.json()["runs"] if r.status_code == 200 else []
            return any(run["status"] == "succeeded" for run in runs)

        fleet.wait("the job's run succeeded", succeeded, 60)
        run = next(run for run in runs if run["status"] == "succeeded")
        assert run["started_at"] and run["finished_at"]

        for m in fleet.machines.values():
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
            written = secrets_env.read_text()
            assert f"/{db_name}?sslmode=prefer&application_name={m.role}:" in written
            # the services connect as the app role; maintenance, whose partitions are
            # DDL, as the owner
            user = fleet.admin["username"] if m.role == "maintenance" else app_user
            assert f"://{user}:" in written, (m.role, user)
            # the process running is the unit's ExecStart, word for word: the bootstrap
            # exec'd cronfleet-env, which exec'd the cronfleet console script (same pid)
            unit = (m.root / f"systemd/cronfleet-{m.role}.service").read_text()
            exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
            wrapper, program, *args = exec_start.removeprefix("ExecStart=").split()
            assert wrapper == str(m.root / "opt/bin/cronfleet-env") and program == "cronfleet"
            cmdline = _service_cmdline(m.pid())
            assert cmdline[-len(args) :] == args, (exec_start, cmdline)
            assert cmdline[-len(args) - 1].endswith("/opt/bin/cronfleet"), cmdline
            assert "ExecStartPre=" in unit and "cronfleet db wait" in unit
        # the app role's password: generated by the api machine, in the app secret
        assert fleet.aws.secret(APP_SECRET_ARN)["password"]
        assert fleet.aws.secret(ADMIN_SECRET_ARN) == fleet.admin
        _app_role_has_no_ddl(fleet, app_user)
        _a_rotated_secret_is_read_again(fleet, app_user)
        _verify_units([m.root / "systemd" for m in fleet.machines.values()])
        _only_the_kit_installed(fleet.machines["worker"].root)
    finally:
        fleet.stop()
        fleet.delete_topics()


def _app_role_has_no_ddl(fleet: LocalFleet, app_user: str) -> None:
    out = fleet.run(
        "worker",
        "python",
        "-c",
        "import os, sqlalchemy as sa\n"
        "e = sa.create_engine(os.environ['CRONFLEET_DATABASE_URL'])\n"
        "with e.begin() as c: c.execute(sa.text('CREATE TABLE intruder (x int)'))",
    )
    assert out.returncode != 0 and "permission denied" in out.stderr, out.stderr


def _a_rotated_secret_is_read_again(fleet: LocalFleet, app_user: str) -> None:
    """A new password (what rotating the app secret does: the role's password changed,
    the secret's value with it): `cronfleet-secrets`, run before every start of the
    service and by a 5-minute timer, writes it; the next connection uses it."""
    new = {"username": app_user, "password": "rotated-" + os.urandom(8).hex()}
    engine = create_engine(fleet.owner_url(), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"ALTER ROLE \"{app_user}\" PASSWORD '{new['password']}'"))
    engine.dispose()
    fleet.aws.put_secret(APP_SECRET_ARN, new)
    before = fleet.run("scheduler", "cronfleet", "db", "current")
    assert before.returncode != 0, "the old password still works: nothing was rotated"
    refreshed = fleet.run("scheduler", "cronfleet-secrets")
    assert refreshed.returncode == 0 and "secrets.env: changed" in refreshed.stdout, refreshed
    after = fleet.run("scheduler", "cronfleet", "db", "current")
    assert after.returncode == 0, after.stderr
    again = fleet.run("scheduler", "cronfleet-secrets")
    assert "secrets.env: unchanged" in again.stdout
    written = (fleet.machines["scheduler"].root / "etc/secrets.env").read_text()
    url = make_url(written.strip().split("=", 1)[1].strip("'"))
    assert url.password == new["password"]


def test_a_wheel_that_is_not_the_release_is_refused(
    tmp_path: Path, database: Database, release: tuple[Path, str]
) -> None:
    """What S3 serves must be what Terraform uploaded: another wheel under the key (or a
    corrupted download) stops the boot before anything is installed."""
    db_name, app_user = database.name, database.app_user
    wheel, sha256 = release
    fleet = LocalFleet(tmp_path, db_name, database.owner, app_user, wheel, sha256, roles=["worker"])
    tampered = tmp_path / "tampered" / wheel.name
    tampered.parent.mkdir()
    tampered.write_bytes(wheel.read_bytes() + b"\0")
    fleet.aws.put_object("cronfleet-release-test", fleet.key, tampered)
    m = fleet.machines["worker"]
    out = fleet.boot_here("worker", timeout=120)
    assert out.returncode == 1, out.stderr
    assert f"the release's is {sha256}" in out.stderr
    assert not (m.root / "opt/bin/cronfleet").exists()


def test_a_bad_task_policy_stops_the_boot(
    tmp_path: Path, database: Database, release: tuple[Path, str]
) -> None:
    """The kit reads the module's task policy at boot and refuses a bad one with a line
    naming the entry, before any service starts (no restart loop)."""
    db_name, app_user = database.name, database.app_user
    wheel, sha256 = release
    bad = '[tenants.acme]\ncommands = "/bin/sh"\n'  # a string, not a list
    fleet = LocalFleet(
        tmp_path,
        db_name,
        database.owner,
        app_user,
        wheel,
        sha256,
        task_policy=bad,
        roles=["worker"],
    )
    m = fleet.machines["worker"]
    out = fleet.boot_here("worker", timeout=300)
    assert out.returncode != 0
    assert "task policy refused" in out.stderr and "commands" in out.stderr, out.stderr
    assert not (m.root / "etc/secrets.env").exists()  # stopped before the service's gates


def test_a_bad_tenant_policy_stops_the_boot(
    tmp_path: Path, database: Database, release: tuple[Path, str]
) -> None:
    """The module's tenant policy is checked at boot like the task policy: one line naming
    the entry, and no service started on a policy the kit would refuse."""
    wheel, sha256 = release
    fleet = LocalFleet(
        tmp_path,
        database.name,
        database.owner,
        database.app_user,
        wheel,
        sha256,
        tenant_policy="[tenants.acme]\nweight = 0\n",
        roles=["api"],
    )
    m = fleet.machines["api"]
    out = fleet.boot_here("api", timeout=300)
    assert out.returncode != 0
    assert "tenant policy refused" in out.stderr and "tenants.acme.weight" in out.stderr, out.stderr
    assert not (m.root / "etc/secrets.env").exists()  # stopped before the service's gates


def _only_the_kit_installed(root: Path) -> None:
    """The machine's venv holds the kit and what its services need: the model's, the
    drills' and the load tests' libraries are extras, and their commands say so."""
    venv = root / "opt"
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
        env={"PATH": "/usr/bin:/bin", "HOME": str(root)},
    )
    assert sim.returncode == 2 and "pip install 'cronfleet[sim]'" in sim.stderr, sim.stderr


def _service_cmdline(pid: int | None) -> list[str]:
    """The bootstrap exec'd cronfleet-env, which exec'd cronfleet: same pid, new argv."""
    assert pid is not None
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [a.decode() for a in raw.split(b"\0") if a]


def _verify_units(dirs: list[Path]) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return  # stated in local_fleet.py: not every machine has systemd's tools
    for d in dirs:
        units = sorted(str(p) for p in d.iterdir())
        out = subprocess.run([tool, "verify", *units], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert not [line for line in out.stderr.splitlines() if "cronfleet" in line], out.stderr
