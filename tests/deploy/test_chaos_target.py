"""`cronfleet chaos run machine-kill --target FILE` against the bootstrap test's machines:
every role of the fleet module booted here from the released wheel, a target file that
says where the API, the database and the brokers are and stops and starts the worker's
machine with shell commands (power-off: SIGKILL to the machine's whole process tree;
power-on: its user data again), the drill's workload, ledger and audit as on the drills'
own stack. The tasks run as the task policy's run_as user and write the ledger in a
directory this test and the worker share (one filesystem)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from chaos.drill import Timings
from kit.tasks.tenant_policy import local_tenants_toml
from tests.deploy.conftest import Database
from tests.deploy.local_fleet import LocalFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

POLICY = '[tenants.chaos]\ncommands = ["/bin/sh"]\nrun_as = "nobody"\n'


def _toml(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def target_file(fleet: LocalFleet, ledger: Path, journal: Path, timings: Timings) -> str:
    lines = [
        f"api_url = {_toml(fleet.api_url)}",
        f"database_url = {_toml(fleet.owner_url())}",
        f"kafka_bootstrap = {_toml(fleet.stack.kafka_bootstrap)}",
        f"topic_prefix = {_toml(fleet.prefix)}",
        f"worker_group = {_toml(fleet.group)}",
        f"ledger_dir = {_toml(str(ledger))}",
        f"journal_dir = {_toml(str(journal))}",
        "",
        "[timings]",
        *(f"{k} = {v}" for k, v in vars(timings).items()),
    ]
    for role in ("worker", "scheduler"):
        m = fleet.machines[role]
        lines += [
            "",
            f"[machines.{role}-1]",
            f"role = {_toml(role)}",
            f"stop = {_toml(str(m.stop_script))}",
            f"start = {_toml(str(m.boot_script))}",
        ]
    return "\n".join(lines) + "\n"


def test_machine_kill_drill_through_a_target_file(
    tmp_path: Path,
    database: Database,
    release: tuple[Path, str],
) -> None:
    wheel, sha256 = release
    timings = Timings()  # the drills' short leases, so that cycles take seconds
    journal = tmp_path / "journal"
    # the tasks run as `nobody`: the ledger must be reachable by it (pytest's tmp is not)
    ledger = Path(tempfile.mkdtemp(prefix="cronfleet-chaos-ledger-"))
    settings = timings.env() | {"CRONFLEET_EXECUTION_JOURNAL_DIR": str(journal)}
    settings.pop("CRONFLEET_LOG_LEVEL")
    fleet = LocalFleet(
        tmp_path,
        database.name,
        database.owner,
        database.app_user,
        wheel,
        sha256,
        task_policy=POLICY,
        tenant_policy=local_tenants_toml(["chaos"]),  # the workload uses every tier
        run_as_users=("nobody",),
        extra_settings=settings,
    )
    target = tmp_path / "target.toml"
    target.write_text(target_file(fleet, ledger, journal, timings))
    out = tmp_path / "out"
    try:
        fleet.boot()
        fleet.wait_up(240)
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "kit.cli",
                "chaos",
                "run",
                "machine-kill",
                "--target",
                str(target),
                "--cycles",
                "3",
                "--seed",
                "7",
                "--no-model",
                "--out",
                str(out),
                "--json",
                str(out / "result.json"),
            ],
            capture_output=True,
            text=True,
            timeout=1200,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert run.returncode == 0, run.stdout + run.stderr + fleet.logs()
        (drill,) = json.loads((out / "result.json").read_text())["drills"]
        a = drill["audit"]
        assert drill["passed"] and a["expected"] > 50, drill
        assert a["lost"] == 0 and a["duplicate_effects"] == 0
        assert a["stale_writes_accepted"] == 0
        faults = json.loads((out / "machine-kill" / "faults.json").read_text())["faults"]
        assert len(faults) == 3 and {f["kind"] for f in faults} == {"machine_kill"}
        assert {f["target"] for f in faults} <= {"worker-1", "scheduler-1"}
        # the stop and start commands ran (the machines' logs say so), and the fleet is up
        logs = "".join(p.read_text() for p in (out / "machine-kill" / "logs").glob("*.log"))
        assert logs.count("--- stop") == 3 and logs.count("--- start") == 3
        fleet.wait_up(240)
        # the witness is gone from the deployment's database
        engine = create_engine(fleet.owner_url())
        assert "chaos_writes" not in inspect(engine).get_table_names()
        engine.dispose()
        report = out / "machine-kill" / "report.md"
        assert report.exists()
        keep = os.environ.get("CRONFLEET_KEEP_CHAOS_TARGET_REPORT")
        if keep:  # docs/chaos.md's figures come from here
            shutil.copytree(out, keep, dirs_exist_ok=True)
    finally:
        fleet.stop()
        fleet.delete_topics()
        shutil.rmtree(ledger, ignore_errors=True)
