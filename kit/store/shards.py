"""The shards a deployment names (CRONFLEET_DATABASE_URL, the home shard, and
CRONFLEET_SHARD_URLS): can each be reached, and are they all at one schema revision.

A service that writes to two shards at different revisions would write one table two
ways, so it refuses to start on that, and on a shard that does not answer, with one line
naming the shard; `cronfleet db upgrade` migrates every shard, `cronfleet shards check`
says the same as the services' start gate. docs/shards.md: what lives where.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kit.core.errors import ShardProblem
from kit.store import migrate

CONNECT_TIMEOUT_S = 5
__all__ = ["ShardProblem", "ShardState", "catalog_problem", "problem", "require_usable", "states"]


@dataclass(frozen=True)
class ShardState:
    name: str
    shown_url: str  # without its password
    revision: str | None  # None: never migrated
    head: str | None  # this code's newest revision
    error: str = ""  # why it could not be asked, when it could not

    @property
    def answers(self) -> bool:
        return not self.error


def hidden(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL: say nothing of it that could be a secret
        return "(unparsable URL)"


def state_of(name: str, url: str) -> ShardState:
    shown = hidden(url)
    try:
        revision = migrate.current_revision(url, connect_timeout_s=CONNECT_TIMEOUT_S)
        head = migrate.head_revision(url)
    except Exception as exc:  # unreachable, refused, a bad URL: one line of why
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return ShardState(name, shown, None, None, f"{type(exc).__name__}: {first}"[:300])
    return ShardState(name, shown, revision, head)


def states(shards: Mapping[str, str]) -> list[ShardState]:
    return [state_of(name, url) for name, url in shards.items()]


def problem(found: list[ShardState]) -> str | None:
    """One line naming what stops a service from using these shards, or None."""
    for shard in found:
        if not shard.answers:
            return f"shard {shard.name} ({shard.shown_url}) does not answer: {shard.error}"
        if shard.revision is None:
            return f"shard {shard.name} was never migrated: run `cronfleet db upgrade`"
    revisions = {shard.revision for shard in found}
    if len(revisions) > 1:
        listed = ", ".join(f"{s.name} at {s.revision or 'none'}" for s in found)
        return (
            f"shards at different schema revisions ({listed}): run `cronfleet db upgrade`, "
            "which migrates every shard"
        )
    return None


def catalog_problem(shards: Mapping[str, str]) -> str | None:
    """One line naming why the home shard's stored map cannot run with these settings."""
    from kit.core.errors import FieldError
    from kit.store.shard_catalog import deployed_map, map_problem

    try:
        shard_map, _ = deployed_map(shards)
    except FieldError as exc:
        return f"the stored shard map (home shard, table shard_map): {exc}"
    return map_problem(shard_map, shards)


def require_usable(shards: Mapping[str, str]) -> None:
    """A service's start gate when the deployment has more than one shard (one database
    keeps today's behaviour: `cronfleet db wait` gates it): every shard answers, all at
    one revision, and the stored map agrees with the settings. Raises ShardProblem."""
    if len(shards) < 2:
        return
    if (line := problem(states(shards)) or catalog_problem(shards)) is not None:
        raise ShardProblem(line)
