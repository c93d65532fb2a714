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
- `cwd`: directories its commands may name as their working directory (the directory
  itself or one below it). Without it a command runs in the run's own fresh directory.
- `env`: the environment names its commands may set: exact names, or prefixes ending in
  `*` (`APP_*`). Without it a command may set none. Whatever the list says, a name in
  ALWAYS_REFUSED_ENV is never set: each makes a shell, an interpreter, the dynamic
  loader or a common program run code of the job's choosing, or is one the kit sets.
- `http_allow_hosts`: hosts and CIDRs its HTTP tasks may reach although private or
  loopback, added to the operator's `CRONFLEET_HTTP_ALLOW_HOSTS` for every tenant.

The API refuses a command the policy does not allow (403, and writes nothing), and the
worker asks again before it starts one, against the policy as it is then: a job
written before the operator withdrew a permission does not run. Every answer here is a
comparison of strings: a refusal never depends on, so never tells, what is on disk.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kit.core.env_names import always_refused, always_refused_prefix
from kit.core.errors import FieldError

_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_TENANT_KEYS = frozenset({"commands", "run_as", "cwd", "env", "http_allow_hosts"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # what a shell can export
_ENV_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")  # a name, or a prefix and '*'


@dataclass(frozen=True)
class CommandPermit:
    """The commands one tenant may run, as whom, where, and with which variables."""

    executables: frozenset[str]
    run_as: str | None = None
    cwd: tuple[str, ...] = ()  # directories a command may work in, each with what is below
    env: tuple[str, ...] = ()  # names, and prefixes ending in '*', a command may set

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

    def cwd_refusal(self, cwd: object, tenant: str) -> str | None:
        """Why a command may not work in `cwd`, or None: it must be one of the operator's
        directories or below one, compared as text (what is on disk is not looked at, so
        a refusal tells nothing of it; the worker enters the directory as the run-as user)."""
        if not isinstance(cwd, str) or not normal_path(cwd):
            return NOT_NORMAL_PATH
        if not any(cwd == d or cwd.startswith(d.rstrip("/") + "/") for d in self.cwd):
            allowed = ", ".join(sorted(self.cwd)) or "none"
            return (
                f"is not a directory the operator allowed for tenant {tenant!r} "
                f"(allowed: {allowed})"
            )
        return None

    def env_refusal(self, name: str, tenant: str) -> str | None:
        """Why a command may not set `name`, or None: never an always-refused name, and
        otherwise only a name the operator's list has (exactly, or by a prefix)."""
        if reason := env_name_refusal(name):
            return reason
        if not any(name == e or (e[-1] == "*" and name.startswith(e[:-1])) for e in self.env):
            allowed = ", ".join(sorted(self.env)) or "none"
            return (
                f"is not a name the operator allowed tenant {tenant!r} to set (allowed: {allowed})"
            )
        return None

    def identity_refusal(self, worker_is_root: bool, tenant: str) -> str | None:
        """A root worker runs a tenant's commands only as the tenant's run-as user."""
        if worker_is_root and self.run_as is None:
            return (
                f"tenant {tenant!r} has no run_as user and this worker runs as root, so it "
                "runs none of its commands (give it a run_as user)"
            )
        return None

    def task_refusal(self, task: Mapping[str, object], tenant: str) -> tuple[str, str] | None:
        """(field within the task, reason) for the first thing of this command task the
        permit does not allow, else None: argv[0], then cwd, then each env name."""
        argv = task.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            return "argv", "must be a list of strings"
        if reason := self.refusal(argv, tenant):
            return "argv[0]", reason
        cwd = task.get("cwd")
        if cwd is not None and (reason := self.cwd_refusal(cwd, tenant)):
            return "cwd", reason
        env = task.get("env") or {}
        if not isinstance(env, Mapping):
            return "env", "must be an object of names and values"
        for name in env:
            if reason := self.env_refusal(str(name), tenant):
                return f"env.{name}", reason
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
        """`{"tenants": {"acme": {"commands": [...], "run_as": ..., "cwd": [...], "env":
        [...], "http_allow_hosts": [...]}}}`, as read from the operator's TOML file.
        FieldError names the entry."""
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

    def command_refusal(self, tenant: str, task: Mapping[str, object]) -> tuple[str, str] | None:
        """(field, reason) if this tenant may not write this command task, else None."""
        permit = self.for_tenant(tenant).commands
        if permit is None:
            return "task.type", f"the operator has not allowed command tasks for tenant {tenant!r}"
        refusal = permit.task_refusal(task, tenant)
        return (f"task.{refusal[0]}", refusal[1]) if refusal else None


DENY_ALL = TaskPolicy()
NOT_NORMAL_PATH = "must be an absolute path in normal form (no '.', '..', '//' or trailing '/')"


def normal_path(path: str) -> bool:
    """Absolute and already normalised: the text is the path, so prefixes compare safely."""
    return (
        path.startswith("/")
        and not path.startswith("//")
        and "\x00" not in path
        and posixpath.normpath(path) == path
    )


def env_name_refusal(name: str) -> str | None:
    """Why no job may set `name` whatever the operator allows, or None."""
    if not _ENV_NAME.fullmatch(name):  # not "A\n" (test_tasks_command_schema.py)
        return "must be a name of letters, digits and '_' that does not start with a digit"
    if why := always_refused(name):
        return f"is never a name a job may set: {why}"
    return None


def _strings(where: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FieldError(where, "must be a list of non-empty strings")
    return value


def _directories(where: str, value: object) -> tuple[str, ...]:
    paths = _strings(where, value)
    for index, path in enumerate(paths):
        if not normal_path(path):
            raise FieldError(f"{where}[{index}]", NOT_NORMAL_PATH)
    return tuple(paths)


def _env_entries(where: str, value: object) -> tuple[str, ...]:
    """Names and prefixes; an entry that could only ever name always-refused names is a
    mistake worth stopping for. A wider prefix (`P*`) is kept, the always-refused names
    within it (`PYTHONPATH`, `PS4`) stay refused."""
    entries = _strings(where, value)
    for index, entry in enumerate(entries):
        if not _ENV_ENTRY.match(entry):
            raise FieldError(
                f"{where}[{index}]",
                "must be an environment name, or a prefix ending in '*' (e.g. APP_*)",
            )
        why = always_refused_prefix(entry[:-1]) if entry[-1] == "*" else always_refused(entry)
        if why:
            raise FieldError(f"{where}[{index}]", f"{entry} is always refused ({why}); remove it")
    return tuple(entries)


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
        cwd = _directories(f"{where}.cwd", entry.get("cwd", []))
        env = _env_entries(f"{where}.env", entry.get("env", []))
        permit = CommandPermit(frozenset(executables), run_as, cwd, env)
    else:
        for key in ("run_as", "cwd", "env"):
            if key in entry:
                raise FieldError(f"{where}.{key}", "is only meaningful with commands")
    hosts = _strings(f"{where}.http_allow_hosts", entry.get("http_allow_hosts", []))
    for index, host in enumerate(hosts):
        if "," in host or not host.strip():
            raise FieldError(f"{where}.http_allow_hosts[{index}]", "must be one host or CIDR")
    return TenantPolicy(permit, ",".join(h.strip() for h in hosts))
