"""The operator's tenant policy file (kit.tasks.tenant_policy): refused at start with one
line naming the file and the entry, re-read when it changes, failing closed while an
edit is broken and recovering once it is fixed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit.core.errors import FieldError
from kit.core.tenancy import FAIL_CLOSED, OPEN
from kit.tasks.tenant_policy import RECHECK_S, TenantPolicySource, local_tenants_toml


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write(path: Path, text: str, stamp: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(stamp, stamp))  # a distinct mtime whatever the filesystem's grain


def test_no_file_is_the_open_policy() -> None:
    assert TenantPolicySource(None).current() is OPEN


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("[tenants.acme]\nweight = -1\n", "tenants.acme.weight: must be a number greater than 0"),
        ("[tenants.acme\nweight = 1\n", "is not valid TOML"),
        ("[defaults]\nmax_jobs = 1.5\n", "defaults.max_jobs: must be a whole number"),
    ],
)
def test_a_bad_file_stops_the_service_at_start_naming_the_entry(
    tmp_path: Path, text: str, entry: str
) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(text)
    with pytest.raises(FieldError) as exc:
        TenantPolicySource(path)
    assert exc.value.field == "tenant_policy_file"
    assert str(path) in exc.value.reason and entry in exc.value.reason
    assert "\n" not in str(exc.value)


def test_an_edit_is_followed_a_broken_one_fails_closed_and_a_fix_recovers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tenants.toml"
    write(path, "[tenants.acme]\nmax_jobs = 5\n", 1_000_000_000)
    clock = Clock()
    source = TenantPolicySource(path, clock=clock)
    assert source.current().for_tenant("acme").max_jobs == 5

    write(path, "[tenants.acme]\nmax_jobs = 7\n", 2_000_000_000)
    assert source.current().for_tenant("acme").max_jobs == 5  # not looked at yet
    clock.now += RECHECK_S
    assert source.current().for_tenant("acme").max_jobs == 7

    write(path, "[tenants.acme]\nweight = 0\n", 3_000_000_000)
    clock.now += RECHECK_S
    assert source.current() is FAIL_CLOSED
    assert source.failed is not None and "tenants.acme.weight" in source.failed

    write(path, "[tenants.acme]\nmax_jobs = 9\n", 4_000_000_000)
    clock.now += RECHECK_S
    assert source.current().for_tenant("acme").max_jobs == 9 and source.failed is None


def test_a_deleted_file_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text("")
    clock = Clock()
    source = TenantPolicySource(path, clock=clock)
    path.unlink()
    clock.now += RECHECK_S
    assert source.current() is FAIL_CLOSED


def test_the_local_file_grants_the_kits_own_tenants_every_tier(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(local_tenants_toml(["acme", "bench x"]))
    policy = TenantPolicySource(path).current()
    assert policy.for_tenant("bench x").tier_refusal("critical") is None
    assert policy.for_tenant("other").tier_refusal("critical") is not None
