"""The operator's task policy as it is now, read from the file the settings name, and one
run executed under it.

The file (`CRONFLEET_TASK_POLICY_FILE`, TOML) is read at start, where a mistake stops
the service with one line naming the entry, and again whenever it changes, so the API
and every worker follow an edit without a restart: a permission withdrawn holds for
runs already queued. If an edited file cannot be read or is invalid, the policy fails
closed (no command for anyone, HTTP to public addresses and the global allow-list only)
until it is fixed, and says so in the log.

    # /etc/cronfleet/tasks.toml
    [tenants.acme]
    commands = ["/usr/local/bin/backup", "/usr/bin/rsync"]
    run_as = "cronfleet-acme"
    cwd = ["/srv/acme"]
    env = ["BACKUP_*", "REPORT_DATE"]
    http_allow_hosts = ["10.1.0.0/16", "reports.internal"]
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kit.core.errors import FieldError
from kit.core.redaction import scrub, secret_values
from kit.core.task_policy import DENY_ALL, TaskPolicy
from kit.tasks.context import RunContext, TaskResult
from kit.tasks.egress import AllowList
from kit.tasks.registry import execute, execute_async
from kit.tasks.watched import WatchedFile

log = logging.getLogger(__name__)
SETTING = "task_policy_file"
RECHECK_S = 1.0  # how often the file's mtime is looked at: an edit holds within this


def read_policy(path: Path, http_allow_hosts: str = "") -> TaskPolicy:
    """Parse the operator's file; FieldError naming the file and the entry."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise FieldError(SETTING, f"cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FieldError(SETTING, f"{path} is not valid TOML: {exc}") from None
    try:
        policy = TaskPolicy.parse(data, http_allow_hosts)
        AllowList.parse(http_allow_hosts)
        for tenant in policy.tenants.values():
            AllowList.parse(tenant.http_allow_hosts)
    except FieldError as exc:
        raise FieldError(SETTING, f"{path}: {exc.field}: {exc.reason}") from None
    return policy


class PolicySource(WatchedFile[TaskPolicy]):
    """The current policy: a fixed one, or the operator's file re-read when it changes."""

    def __init__(self, path: str | os.PathLike[str] | None, http_allow_hosts: str = "") -> None:
        super().__init__(
            path,
            lambda p: read_policy(p, http_allow_hosts),
            empty=TaskPolicy(http_allow_hosts=http_allow_hosts),
            closed=lambda: TaskPolicy(http_allow_hosts=http_allow_hosts),
            recheck_s=lambda: RECHECK_S,  # looked up at each call (tests set it to 0)
            log=log,
            what="task policy",
            closed_means="no command runs until it is fixed",
        )

    @classmethod
    def fixed(cls, policy: TaskPolicy) -> PolicySource:
        source = cls(None, policy.http_allow_hosts)
        source._policy = policy
        return source


def local_run_as() -> str | None:
    """The run-as user of the kit's own tenants on this machine (drills, benchmarks,
    calibration, tests): `nobody` where they run as root, whose worker runs no command of
    a tenant without one; none otherwise (a worker of another user runs them as itself,
    and could not switch). What such a command writes must be writable by that user."""
    return "nobody" if os.geteuid() == 0 else None


def local_policy_toml(tenant: str, commands: Sequence[str]) -> str:
    """A policy file letting `tenant` run `commands` as `local_run_as()`."""
    lines = [f"[tenants.{tenant}]", f"commands = {json.dumps(list(commands))}"]
    if run_as := local_run_as():
        lines.append(f"run_as = {json.dumps(run_as)}")
    return "\n".join(lines) + "\n"


def policy_source(path: str, http_allow_hosts: str) -> PolicySource:
    """From the settings (`task_policy_file`, `http_allow_hosts`), checked now."""
    return PolicySource(path or None, http_allow_hosts)


def run_task(
    spec: Mapping[str, Any],
    ctx: RunContext,
    policy: TaskPolicy = DENY_ALL,
    worker_secrets: tuple[str, ...] = (),
) -> TaskResult:
    """Execute one run as the operator's policy allows it for `ctx.tenant`: its commands,
    its run-as user, its egress; the result scrubbed of the job's secret values and of
    the worker's own (`worker_secrets`: the database URL and its password). Whatever the
    task type, what it may run and reach comes from here, never from the spec."""
    ctx = under_policy(spec, ctx, policy, worker_secrets)
    return _scrubbed(execute(spec, ctx), ctx.secrets)


async def run_task_async(
    spec: Mapping[str, Any],
    ctx: RunContext,
    policy: TaskPolicy = DENY_ALL,
    worker_secrets: tuple[str, ...] = (),
) -> TaskResult:
    """`run_task` for a type that runs on the worker's task loop (registry.ASYNC)."""
    ctx = under_policy(spec, ctx, policy, worker_secrets)
    return _scrubbed(await execute_async(spec, ctx), ctx.secrets)


def under_policy(
    spec: Mapping[str, Any],
    ctx: RunContext,
    policy: TaskPolicy,
    worker_secrets: tuple[str, ...] = (),
) -> RunContext:
    """The run's context with what the operator allows `ctx.tenant` (commands, egress)
    and the values to scrub from what it reports; nothing of it comes from the spec."""
    tenant = policy.for_tenant(ctx.tenant)
    return RunContext(
        run_id=ctx.run_id,
        attempt=ctx.attempt,
        timeout_s=ctx.timeout_s,
        cancel=ctx.cancel,
        allow_hosts=tenant.http_allow_hosts,
        tenant=ctx.tenant,
        commands=tenant.commands,
        secrets=(*secret_values(spec), *worker_secrets),
        begin=ctx.begin,
        slot=ctx.slot,
    )


def _scrubbed(result: TaskResult, secrets: tuple[str, ...]) -> TaskResult:
    """The error scrubbed here (the types' own excerpts are scrubbed where they are cut,
    kit.core.output); the output as its type made it."""
    if result.error is None:
        return result
    return replace(result, error=scrub(result.error, secrets))
