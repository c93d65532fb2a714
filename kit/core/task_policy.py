"""What the operator lets each tenant's tasks do: the decisions, on a policy already read.

Tenants are untrusted, so what a task may reach is the operator's choice, made in the
kit's configuration (a file named by `CRONFLEET_TASK_POLICY_FILE`), never through the
API. By default a tenant may run no command at all, and its HTTP tasks reach public
addresses only. For a tenant the operator names:

- `commands`: the executables its command tasks may start, by absolute path, matched
  exactly against `argv[0]` (no PATH lookup, so no executable of the same name
  elsewhere stands in for it). Allowing an executable allows whatever it does with any
  arguments: an interpreter or a shell is a shell for that tenant.
- `run_as`: the system user its commands run as (that user's group, no supplementary
  groups). A worker running as root runs no command of a tenant without one.
- `http_allow_hosts`: hosts and CIDRs its HTTP tasks may reach although private or
  loopback, added to the operator's `CRONFLEET_HTTP_ALLOW_HOSTS` for every tenant.

The API refuses a command the policy does not allow (403, and writes nothing), and the
worker asks again before it starts one, against the policy as it is then: a job
written before the operator withdrew a permission does not run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kit.core.errors import FieldError

_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_TENANT_KEYS = frozenset({"commands", "run_as", "http_allow_hosts"})
# Environment names a job may not set for its command: the dynamic loader's (they make
# any allowed executable load code of the job's choosing) and the kit's own.
_RESERVED_ENV_PREFIXES = ("LD_", "CRONFLEET_")


@dataclass(frozen=True)
class CommandPermit:
    """The commands one tenant may run."""

    executables: frozenset[str]
    run_as: str | None = None

    def refusal(self, argv: Sequence[str], tenant: str) -> str | None:
        """Why this argv may not run, or None if it may."""
        if not argv:
            return "must name an executable"
        if argv[0] not in self.executables:
            allowed = ", ".join(sorted(self.executables)) or "none"
            return (
                f"{argv[0]!r} is not an executable the operator allowed for tenant "
                f"{tenant!r} (allowed: {allowed})"
            )
        return None


@dataclass(frozen=True)
class TenantPolicy:
    commands: CommandPermit | None = None  # None: no command tasks
    http_allow_hosts: str = ""  # comma-separated, this tenant's own holes


@dataclass(frozen=True)
class TaskPolicy:
    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)
    http_allow_hosts: str = ""  # every tenant's holes (CRONFLEET_HTTP_ALLOW_HOSTS)
    # for_tenant's answers: a worker asks for every run it starts, and a policy never
    # changes (an edited file is a new policy)
    _joined: dict[str, TenantPolicy] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def parse(cls, data: Mapping[str, object], http_allow_hosts: str = "") -> TaskPolicy:
        """`{"tenants": {"acme": {"commands": [...], "run_as": ..., "http_allow_hosts":
        [...]}}}`, as read from the operator's TOML file. FieldError names the entry."""
        extra = sorted(set(data) - {"tenants"})
        if extra:
            raise FieldError(extra[0], "unknown setting (expected [tenants.<name>] tables)")
        tenants = data.get("tenants", {})
        if not isinstance(tenants, Mapping):
            raise FieldError("tenants", "must be a table of tenants")
        parsed = {str(name): _tenant(f"tenants.{name}", entry) for name, entry in tenants.items()}
        return cls(parsed, http_allow_hosts)

    def for_tenant(self, tenant: str) -> TenantPolicy:
        """This tenant's policy, its HTTP holes joined with everyone's."""
        joined = self._joined.get(tenant)
        if joined is None:
            own = self.tenants.get(tenant, TenantPolicy())
            hosts = ",".join(h for h in (self.http_allow_hosts, own.http_allow_hosts) if h)
            joined = self._joined[tenant] = TenantPolicy(own.commands, hosts)
        return joined

    def command_refusal(self, tenant: str, argv: Sequence[str]) -> tuple[str, str] | None:
        """(field, reason) if this tenant may not run this argv, else None."""
        permit = self.for_tenant(tenant).commands
        if permit is None:
            return "task.type", f"the operator has not allowed command tasks for tenant {tenant!r}"
        reason = permit.refusal(argv, tenant)
        return ("task.argv[0]", reason) if reason else None


DENY_ALL = TaskPolicy()


def reserved_env_name(name: str) -> bool:
    return name.upper().startswith(_RESERVED_ENV_PREFIXES)


def _strings(where: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FieldError(where, "must be a list of non-empty strings")
    return value


def _tenant(where: str, entry: object) -> TenantPolicy:
    if not isinstance(entry, Mapping):
        raise FieldError(where, "must be a table")
    extra = sorted(set(entry) - _TENANT_KEYS)
    if extra:
        raise FieldError(f"{where}.{extra[0]}", f"unknown setting; one of {sorted(_TENANT_KEYS)}")
    run_as = entry.get("run_as")
    if run_as is not None and (not isinstance(run_as, str) or not _USER.match(run_as)):
        raise FieldError(f"{where}.run_as", "must be a system user name")
    if run_as == "root":
        raise FieldError(f"{where}.run_as", "must not be root")
    permit = None
    if "commands" in entry:
        executables = _strings(f"{where}.commands", entry["commands"])
        for index, path in enumerate(executables):
            if not path.startswith("/") or "\x00" in path:
                raise FieldError(f"{where}.commands[{index}]", "must be an absolute path")
        permit = CommandPermit(frozenset(executables), run_as)
    elif run_as is not None:
        raise FieldError(f"{where}.run_as", "is only meaningful with commands")
    hosts = _strings(f"{where}.http_allow_hosts", entry.get("http_allow_hosts", []))
    for index, host in enumerate(hosts):
        if "," in host or not host.strip():
            raise FieldError(f"{where}.http_allow_hosts[{index}]", "must be one host or CIDR")
    return TenantPolicy(permit, ",".join(h.strip() for h in hosts))
