"""The operator's tenant policy as it is now (kit.core.tenancy), read from the file the
settings name, as kit.tasks.policy reads the task policy.

The file (`CRONFLEET_TENANT_POLICY_FILE`, TOML) is read at start, where a mistake stops
the service with one line naming the file and the entry (`tenants.acme.weight: must be
a number greater than 0`), and again whenever it changes (its mtime or size, looked at
about every second), so the API and every worker follow an edit without a restart. If an
edited file cannot be read or is invalid, the policy fails closed
(kit.core.tenancy.FAIL_CLOSED: no job created, no tier usable, nothing started) until it
is fixed, and says so in the log. No file: kit.core.tenancy.OPEN.

It lives beside the task policy's source, in a driver both the API and the worker import.
"""

from __future__ import annotations

import json
import logging
import os
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from kit.core.dispatch import PRIORITY_TIERS
from kit.core.errors import FieldError
from kit.core.tenancy import FAIL_CLOSED, OPEN, TenantsPolicy
from kit.tasks.watched import WatchedFile

log = logging.getLogger(__name__)
SETTING = "tenant_policy_file"
RECHECK_S = 1.0  # how often the file's mtime is looked at: an edit holds within this


def read_tenants(path: Path) -> TenantsPolicy:
    """Parse the operator's file; FieldError naming the file and the entry."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise FieldError(SETTING, f"cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FieldError(SETTING, f"{path} is not valid TOML: {exc}") from None
    try:
        return TenantsPolicy.parse(data)
    except FieldError as exc:
        raise FieldError(SETTING, f"{path}: {exc.field}: {exc.reason}") from None


class TenantPolicySource(WatchedFile[TenantsPolicy]):
    """The current tenant policy: a fixed one, or the operator's file re-read when it
    changes. `current` is what the API and the worker call (a `Callable[[], TenantsPolicy]`)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            path,
            read_tenants,
            empty=OPEN,
            closed=lambda: FAIL_CLOSED,
            recheck_s=lambda: RECHECK_S,
            log=log,
            what="tenant policy",
            closed_means="no job is created and no run started until it is fixed",
            clock=clock,
        )

    @classmethod
    def fixed(cls, policy: TenantsPolicy) -> TenantPolicySource:
        source = cls(None)
        source._policy = policy
        return source


def tenant_policy_source(path: str) -> TenantPolicySource:
    """From the settings (`tenant_policy_file`), checked now."""
    return TenantPolicySource(path or None)


def local_tenants_toml(tenants: Sequence[str], tiers: Sequence[str] | None = None) -> str:
    """A tenant policy file granting the kit's own tenants on this machine (drills,
    benchmarks, load tests, the tests, the README's walkthrough) every priority tier,
    `critical` included, and no limit: the operator's choice for its own work, never
    the default for a tenant."""
    granted = list(tiers if tiers is not None else PRIORITY_TIERS)
    lines: list[str] = []
    for tenant in tenants:
        lines += [f"[tenants.{json.dumps(tenant)}]", f"tiers = {json.dumps(granted)}", ""]
    return "\n".join(lines)
