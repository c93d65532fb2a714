"""Planted bugs: realistic one-place edits of the kit, each breaking one promise, and the
tests that must fail when it is made. Two lists:

- PLANTS, the five edits that once went unnoticed by the whole suite (docs/testing.md
  says how to make each by hand and which test catches it now);
- GUARDS, the store's SQL guards (lease tokens, epochs, expiries, statuses), each edit a
  mutant of one condition: mutmut cannot mutate SQL inside strings, so these are its
  documented substitute for the store (docs/mutation.md).

`python -m scripts.plants` applies each to a scratch copy of the checkout and runs its
catching tests there, expecting them to fail; tests/unit/test_plants.py holds every
edit applicable to the code as it is (its text found exactly once).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Plant:
    name: str
    promise: str  # what breaks
    path: str  # the file edited, from the checkout's root
    edits: tuple[tuple[str, str], ...]  # (text, replacement): each text occurs once
    caught_by: tuple[str, ...]  # pytest node ids (from the root) of which one must fail

    def apply(self, root: Path) -> None:
        """Make the edits in the checkout (or scratch copy) at `root`."""
        path = root / self.path
        source = path.read_text()
        for old, new in self.edits:
            if source.count(old) != 1:
                raise ValueError(f"{self.name}: {old!r} found {source.count(old)} times")
            source = source.replace(old, new)
        path.write_text(source)


PLANTS: tuple[Plant, ...] = (
    Plant(
        "scan_split_transaction",
        "a trigger is advanced in the same transaction that inserts its run",
        "kit/scheduler/scan.py",
        (
            # every batch by the general statements (the on-time ones write both together)
            ("    general = plan.general\n", "    general = sorted(plan.decisions(due).items())\n"),
            ("    if plan.on_time:\n", "    if False:\n"),
            (
                "    inserted = sql.runs_insert(conn, rows)\n",
                "    sql.triggers_delete(conn, deletes)\n"
                "    sql.triggers_insert(conn, nexts)\n"
                '    conn.exec_driver_sql("COMMIT")  # the trigger advance commits alone\n'
                '    conn.exec_driver_sql("BEGIN")  # the runs, in a second transaction\n'
                "    inserted = sql.runs_insert(conn, rows)\n",
            ),
            (
                "    sql.triggers_delete(conn, deletes)\n"
                "    sql.triggers_park(conn, list(parks.values()))\n"
                "    sql.triggers_insert(conn, nexts)\n",
                "    sql.triggers_park(conn, list(parks.values()))\n",
            ),
        ),
        (
            "tests/crash/test_crash_consistency.py::"
            "test_a_crash_at_any_point_loses_nothing_and_doubles_no_effect",
        ),
    ),
    Plant(
        "reaper_takes_leases_early",
        "a reaper takes a lease only once it has expired",
        "kit/store/reaping.py",
        (
            (
                "WHERE r.status = {RUN_RUNNING} AND r.lease_expires_at <= {NOW}\n",
                "WHERE r.status = {RUN_RUNNING} AND r.lease_expires_at <= {NOW} "
                "+ interval '5 seconds'\n",
            ),
        ),
        (
            "tests/contract/test_run_lease.py::test_run_lease_store_equals_core",
            "tests/integration/test_worker_claims.py::"
            "test_the_reaper_leaves_a_lease_a_millisecond_before_its_expiry",
        ),
    ),
    Plant(
        "egress_checks_first_address",
        "every address a host name resolves to passes the egress guard",
        "kit/tasks/egress.py",
        (("    for address in addresses:\n", "    for address in addresses[:1]:\n"),),
        ("tests/unit/test_tasks_egress.py::test_a_name_is_refused_if_any_of_its_addresses_is",),
    ),
    Plant(
        "http_dials_the_name",
        "the http task connects to the address the guard checked, not a second lookup",
        "kit/tasks/http.py",
        (
            (
                "        pool = self._pools[key] = TargetPool(\n            str(address),\n",
                "        pool = self._pools[key] = TargetPool(\n            host,\n",
            ),
        ),
        (
            "tests/integration/test_tasks_http.py::"
            "test_the_checked_address_is_dialled_not_a_second_lookup",
        ),
    ),
    Plant(
        "job_names_any_tenant",
        "the console names only the signed-in tenant's jobs (defence in depth)",
        "kit/store/jobs_list.py",
        (
            (
                "jobs.c.tenant == tenant, jobs.c.job_id.in_(sorted(set(job_ids)))",
                "jobs.c.job_id.in_(sorted(set(job_ids)))",
            ),
        ),
        (
            "tests/integration/test_console.py::"
            "test_job_names_are_the_tenants_own_whatever_ids_are_asked",
        ),
    ),
)

_LEASE_TESTS = (
    "tests/contract/test_run_lease.py::test_run_lease_store_equals_core",
    "tests/integration/test_worker_claims.py",
    "tests/integration/test_worker_finish_batch.py",
)
_SWITCH_TESTS = ("tests/integration/test_kill_switch.py",)
_PARTITION_TESTS = (
    "tests/contract/test_partition_lease.py::test_partition_lease_store_equals_core",
    "tests/integration/test_scheduler.py",
)


def _guard(name: str, path: str, old: str, new: str, tests: tuple[str, ...]) -> Plant:
    return Plant(name, "a store guard", path, ((old, new),), tests)


GUARDS: tuple[Plant, ...] = (
    _guard(
        "heartbeat_ignores_token",
        "kit/store/claims.py",
        "WHERE r.run_id = h.run_id AND r.lease_token = h.token\n"
        "              AND r.lease_expires_at",
        "WHERE r.run_id = h.run_id\n              AND r.lease_expires_at",
        _LEASE_TESTS,
    ),
    _guard(
        "heartbeat_revives_expired",
        "kit/store/claims.py",
        "AND r.lease_expires_at > {NOW} AND {IN_BATCH}",
        "AND {IN_BATCH}",
        _LEASE_TESTS,
    ),
    _guard(
        "finish_ignores_token",
        "kit/store/claims.py",
        "WHERE r.run_id = d.run_id AND r.lease_token = d.token AND {IN_BATCH}",
        "WHERE r.run_id = d.run_id AND {IN_BATCH}",
        _LEASE_TESTS,
    ),
    _guard(
        "failure_ignores_token",
        "kit/store/claims.py",
        "WHERE r.run_id = :run_id AND r.lease_token = :token\n                FOR UPDATE OF r",
        "WHERE r.run_id = :run_id\n                FOR UPDATE OF r",
        _LEASE_TESTS,
    ),
    _guard(
        "claim_ignores_status",
        "kit/store/claims.py",
        "    WHERE c.status = {RUN_PENDING} AND NOT",
        "    WHERE c.status IN ({RUN_PENDING}, {RUN_RUNNING}) AND NOT",
        _LEASE_TESTS,
    ),
    _guard(
        "claim_ignores_switch",
        "kit/store/claims.py",
        """    WHERE c.status = {RUN_PENDING} AND NOT {held_sql("c", "j.task_spec->>'type'")}""",
        "    WHERE c.status = {RUN_PENDING}",
        _SWITCH_TESTS,
    ),
    _guard(
        "republish_ignores_switch",
        "kit/store/reaping.py",
        "      AND NOT {HELD}\n",
        "",
        _SWITCH_TESTS,
    ),
    _guard(
        "claim_ignores_attempt",
        "kit/store/claims.py",
        "WHERE r.run_id = w.run_id AND r.attempt = w.attempt AND {IN_BATCH}",
        "WHERE r.run_id = w.run_id AND {IN_BATCH}",
        _LEASE_TESTS,
    ),
    _guard(
        "return_ignores_started",
        "kit/store/claims.py",
        "WHERE r.run_id = h.run_id AND r.lease_token = h.token\n"
        "                  AND r.started_at IS NULL AND {IN_BATCH}",
        "WHERE r.run_id = h.run_id AND r.lease_token = h.token\n                  AND {IN_BATCH}",
        _LEASE_TESTS,
    ),
    _guard(
        "release_ignores_token",
        "kit/store/claims.py",
        "UPDATE runs r SET lease_expires_at = {NOW} - interval '1 millisecond'\n"
        "                FROM unnest(CAST(:run_ids AS uuid[]), CAST(:tokens AS text[])) "
        "AS h(run_id, token)\n"
        "                WHERE r.run_id = h.run_id AND r.lease_token = h.token AND {IN_BATCH}",
        "UPDATE runs r SET lease_expires_at = {NOW} - interval '1 millisecond'\n"
        "                FROM unnest(CAST(:run_ids AS uuid[]), CAST(:tokens AS text[])) "
        "AS h(run_id, token)\n"
        "                WHERE r.run_id = h.run_id AND {IN_BATCH}",
        _LEASE_TESTS,
    ),
    _guard(
        "reaper_at_expiry_instant_spared",
        "kit/store/reaping.py",
        "WHERE r.status = {RUN_RUNNING} AND r.lease_expires_at <= {NOW}\n",
        "WHERE r.status = {RUN_RUNNING} AND r.lease_expires_at < {NOW}\n",
        _LEASE_TESTS,
    ),
    _guard(
        "rearm_ignores_status",
        "kit/store/scheduling.py",
        "WHERE runs.run_id = k.run_id AND k.status = {RUN_RETRY_SCHEDULED}"
        ' AND {in_batch("runs")}\n    RETURNING',
        'WHERE runs.run_id = k.run_id AND {in_batch("runs")}\n    RETURNING',
        (
            "tests/contract/test_run_lease.py::test_run_lease_store_equals_core",
            "tests/integration/test_worker_claims.py::"
            "test_a_retry_trigger_rearms_only_a_run_still_waiting_for_its_retry",
        ),
    ),
    _guard(
        "acquire_takes_live_lease",
        "kit/store/scheduling.py",
        "    WHERE l.owner IS NULL OR l.owner = EXCLUDED.owner OR l.expires_at <= {_NOW}\n",
        "    WHERE true\n",
        _PARTITION_TESTS,
    ),
    _guard(
        "acquire_keeps_epoch_on_takeover",
        "kit/store/scheduling.py",
        "                     THEN l.epoch ELSE l.epoch + 1 END,",
        "                     THEN l.epoch ELSE l.epoch END,",
        _PARTITION_TESTS,
    ),
    _guard(
        "fence_ignores_epoch",
        "kit/store/scheduling.py",
        "      ON l.partition_id = w.p AND l.epoch = w.e\n",
        "      ON l.partition_id = w.p\n",
        _PARTITION_TESTS,
    ),
    _guard(
        "fence_ignores_expiry",
        "kit/store/scheduling.py",
        "    WHERE l.owner = :me AND l.expires_at > {_NOW}\n    ORDER BY l.partition_id\n",
        "    WHERE l.owner = :me\n    ORDER BY l.partition_id\n",
        _PARTITION_TESTS,
    ),
    _guard(
        "release_ignores_epoch",
        "kit/store/scheduling.py",
        "    WHERE l.partition_id = r.p AND l.epoch = r.e AND l.owner = :me\n",
        "    WHERE l.partition_id = r.p AND l.owner = :me\n",
        _PARTITION_TESTS,
    ),
)


# What a scratch copy needs to run the tests: the code, the tests, what tests read.
_COPIED = ("kit", "sim", "chaos", "tests", "scripts", "docs", "loadtest", "notebooks")
_COPIED_FILES = ("pyproject.toml", "README.md", "LICENSE")


def scratch_copy(dest: Path, root: Path = ROOT, names: tuple[str, ...] = _COPIED) -> Path:
    """A copy of the checkout at `dest` (caches and build output left out); `names`: the
    top-level directories to copy (a service needs only kit/)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "mutants", ".cronfleet", "bin")
    for name in names:
        if (root / name).exists():
            shutil.copytree(root / name, dest / name, ignore=ignore)
    for name in _COPIED_FILES:
        if (root / name).exists():
            shutil.copy2(root / name, dest / name)
    return dest


# The worker machine's rules (kit.core.worker_run), each changed in one place: the
# storm model runs the machine, so the model's tests see the change (issue 29's paired
# test; the kit's side when kit/worker runs the same machine).
MACHINE: tuple[Plant, ...] = (
    Plant(
        "no_fence",
        "a worker stops a task whose lease it can no longer confirm",
        "kit/core/worker_run.py",
        (("    return now_ms >= entry.fence_at_ms\n", "    return False\n"),),
        (
            "tests/sim/test_storm.py::"
            "test_a_run_past_its_fence_at_its_second_is_given_back_not_started",
        ),
    ),
)


def by_name(name: str) -> Plant:
    for plant in (*PLANTS, *GUARDS, *MACHINE):
        if plant.name == name:
            return plant
    raise KeyError(name)
