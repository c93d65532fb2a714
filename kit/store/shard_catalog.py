"""The shard map as the deployment has it: the catalog row on the home shard, checked
against the shards the settings name (docs/shards.md).

The map names shards and where they are (`host:port/dbname`); the settings give each
name the URL to log in with. Both must agree, or a process would route a partition to a
server the map did not mean. Until the services route by the map, a stored map that puts
any partition off the home shard is refused as well: this release would still write
those partitions' rows on the home shard, behind the map's back.
"""

from __future__ import annotations

from collections.abc import Mapping

from psycopg.errors import UndefinedTable
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError

from kit.core.errors import FieldError
from kit.core.partitions import PARTITION_COUNT
from kit.core.shard_map import (
    ShardMap,
    format_partitions,
    parse_shard_map,
    partitions_of_shard,
)
from kit.settings import HOME_SHARD

CONNECT_TIMEOUT_S = 5


def locator_of(url: str) -> str:
    """`host:port/dbname` of a database URL: where it is, never how to log in."""
    parsed = make_url(url)
    return f"{parsed.host or 'localhost'}:{parsed.port or 5432}/{parsed.database or ''}"


def configured_map(shards: Mapping[str, str]) -> ShardMap:
    """The map when none is stored: every partition on the home shard, the other shards
    named (empty: a move would fill them)."""
    return parse_shard_map(
        {
            "epoch": 0,
            "home": HOME_SHARD,
            "shards": {name: {"locator": locator_of(url)} for name, url in shards.items()},
            "ranges": [{"partitions": f"0-{PARTITION_COUNT - 1}", "shard": HOME_SHARD}],
        }
    )


def stored_map(home_url: str) -> ShardMap | None:
    """The catalog row on the home shard, parsed (FieldError naming the field of a row
    that is no map); None when there is none."""
    engine = create_engine(
        home_url, hide_parameters=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S}
    )
    try:
        with engine.connect() as conn:
            row = conn.execute(text("SELECT epoch, map FROM shard_map WHERE id = 1")).first()
    except ProgrammingError as exc:
        if isinstance(exc.orig, UndefinedTable):  # a schema before 0017: no map stored
            return None
        raise
    finally:
        engine.dispose()
    if row is None:
        return None
    mapping = dict(row.map)
    if mapping.get("epoch", row.epoch) != row.epoch:
        raise FieldError("shard_map.epoch", f"is {row.epoch} but the map says {mapping['epoch']}")
    return parse_shard_map(mapping)


def deployed_map(shards: Mapping[str, str]) -> tuple[ShardMap, bool]:
    """(the map the deployment runs on, whether it is stored) for these settings."""
    found = stored_map(shards[HOME_SHARD])
    return (found, True) if found is not None else (configured_map(shards), False)


def map_problem(shard_map: ShardMap, shards: Mapping[str, str]) -> str | None:
    """One line naming why this map cannot run with these settings, or None."""
    if shard_map.home != HOME_SHARD:
        return (
            f"the shard map's home is {shard_map.home}, but the home shard is the one "
            f"CRONFLEET_DATABASE_URL names (`{HOME_SHARD}`)"
        )
    for name in shard_map.names:
        held = partitions_of_shard(shard_map, name)
        if name not in shards:
            where = f"partitions {format_partitions(held)}" if held else "no partition"
            return (
                f"the shard map names shard {name} ({where}), which CRONFLEET_SHARD_URLS does not"
            )
        if (given := locator_of(shards[name])) != shard_map.locator(name):
            return (
                f"shard {name}: the shard map says {shard_map.locator(name)}, its URL "
                f"points at {given}"
            )
        if held and name != HOME_SHARD:
            return (
                f"the shard map puts partitions {format_partitions(held)} on shard {name}, "
                "but this release still keeps every partition on the home shard "
                "(docs/shards.md): move them back home"
            )
    return None
