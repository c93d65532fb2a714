"""The shard map: which PostgreSQL server (shard) holds each of the 1,024 partitions.

A catalog the operator edits, not a hash ring: each partition is assigned by name to one
shard, in contiguous ranges, so a move takes exactly the partitions it names from one
server to another and nothing else moves. What is partitioned lives on its partition's
shard: a job with its triggers, runs, outputs, dead letters, notifications and audit
entries (the partition of the job id), a pull queue's tasks (the partition of
"tenant/queue"), and the partition's lease row, so that the lease's epoch fence is
checked in the same transaction as the writes it guards.

The *home* shard holds what has no partition: tenants, API tokens and console
sessions, the switches and their audit, the worker and scheduler presence rows, and the
map itself. Those are small, read by nearly every request (a token, a tenant's limits)
or by every process (the map), and written rarely; spread over the shards, each request
would ask two servers, and a process could not find the map without first having it.
A process is configured with the home shard alone and reads the rest from it.

`epoch` counts the map's changes: an applied move adds one, and a move planned against
one epoch is refused by a map at another, so two operators moving at once cannot both
win and a process holding an older map can tell. docs/shards.md: the design around it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TypeGuard

from kit.core.errors import FieldError, FieldErrors
from kit.core.ids import partition_of_run_id, partition_of_task_id
from kit.core.partitions import PARTITION_COUNT, partition_of, partition_of_queue

LAST_PARTITION = PARTITION_COUNT - 1
MAX_SHARDS = PARTITION_COUNT  # one more could hold nothing
# A shard's name: short, lower case, safe in a command line, a log line and a metric label.
SHARD_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
NAME_RULE = "must be a plain identifier: a lower-case letter, then up to 62 of a-z, 0-9, _"
# Where a shard is, never how to log in: credentials come from the environment, so the
# map can be shown, logged and kept in the database as it is.
_LOCATOR = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])"
    r":(?P<port>[0-9]{1,5})/[A-Za-z_][A-Za-z0-9_]{0,62}"
)
LOCATOR_RULE = "must be host:port/dbname, no user or password (the environment has those)"
_RANGE = re.compile(r"(?P<first>[0-9]{1,4})(?:-(?P<last>[0-9]{1,4}))?")
RANGE_RULE = f"must be A-B or one partition, within 0-{LAST_PARTITION} (e.g. 0-511)"
_MAP_FIELDS = ("epoch", "home", "shards", "ranges")
_RANGE_FIELDS = ("partitions", "shard")


@dataclass(frozen=True)
class Shard:
    name: str
    locator: str  # host:port/dbname


@dataclass(frozen=True)
class PartitionRange:
    """Partitions `first` to `last`, both included (as an operator writes 0-511)."""

    first: int
    last: int
    shard: str

    @property
    def partitions(self) -> range:
        return range(self.first, self.last + 1)

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


@dataclass(frozen=True)
class ShardMap:
    """Built as given (so `check` can name what is wrong with a map read from anywhere);
    every routing function refuses a map that `check` refuses."""

    epoch: int
    home: str
    shards: tuple[Shard, ...]
    ranges: tuple[PartitionRange, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.shards)

    def locator(self, name: str) -> str:
        for shard in self.shards:
            if shard.name == name:
                return shard.locator
        raise _unknown("shard", name, self)

    @cached_property
    def owners(self) -> tuple[str, ...]:
        """Each partition's shard, by partition; FieldError(s) as `check` for a bad map."""
        owners, problems = _placement(self)
        _raise(problems)
        return tuple(o for o in owners if o is not None)


@dataclass(frozen=True)
class Move:
    """Partitions leaving their shards for `to_shard`, planned against the map at `epoch`;
    `sources` say where each is now (what the copy reads, per source shard)."""

    epoch: int
    to_shard: str
    sources: tuple[PartitionRange, ...]

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(p for r in self.sources for p in r.partitions)


def check(shard_map: ShardMap) -> None:
    """Refuse a map that would leave a partition on no shard or on two, name a shard it
    does not have, or name a shard badly: FieldError for one problem, FieldErrors for
    several, each naming its field (`shards.NAME.locator`, `ranges[3]`, ...)."""
    _raise(_placement(shard_map)[1])


def _placement(shard_map: ShardMap) -> tuple[list[str | None], list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    if shard_map.epoch < 0:
        problems.append(("epoch", "must be a whole number >= 0"))
    names = shard_map.names
    if not names:
        problems.append(("shards", "the map names no shard: it needs at least one"))
    if len(names) > MAX_SHARDS:
        problems.append(("shards", f"the map names {len(names)} shards, at most {MAX_SHARDS}"))
    seen: set[str] = set()
    for shard in shard_map.shards:
        field = _shard_field(shard.name)
        if not SHARD_NAME.fullmatch(shard.name):
            problems.append((field, NAME_RULE))
        if shard.name in seen:
            problems.append((field, "is named twice"))
        seen.add(shard.name)
        if not _valid_locator(shard.locator):
            problems.append((f"{field}.locator", f"{shard.locator!r} {LOCATOR_RULE}"))
    if shard_map.home not in seen:
        problems.append(("home", f"{shard_map.home!r} is not a shard of the map"))
    owners: list[str | None] = [None] * PARTITION_COUNT
    placed_by: dict[int, int] = {}  # partition -> the range that placed it
    for i, r in enumerate(shard_map.ranges):
        if r.shard not in seen:
            problems.append((f"ranges[{i}].shard", f"{r.shard!r} is not a shard of the map"))
        if not 0 <= r.first <= r.last <= LAST_PARTITION:
            problems.append((f"ranges[{i}].partitions", f"{r} {RANGE_RULE}"))
            continue
        twice: list[int] = []
        for p in r.partitions:
            if owners[p] is None:
                owners[p], placed_by[p] = r.shard, i
            else:
                twice.append(p)
        for j in sorted({placed_by[p] for p in twice}):
            also = format_partitions(p for p in twice if placed_by[p] == j)
            problems.append((f"ranges[{i}]", f"partitions {also} are in ranges[{j}] too"))
    nowhere = [p for p, owner in enumerate(owners) if owner is None]
    if nowhere:
        problems.append(("ranges", f"partitions {format_partitions(nowhere)} are on no shard"))
    return owners, problems


def _valid_locator(locator: str) -> bool:
    found = _LOCATOR.fullmatch(locator)
    return found is not None and 1 <= int(found["port"]) <= 65535


def _shard_field(name: str) -> str:
    return f"shards.{name}" if SHARD_NAME.fullmatch(name) else f"shards[{name!r}]"


def _raise(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise _refusal(problems)


def _refusal(problems: list[tuple[str, str]]) -> FieldError:
    return FieldError(*problems[0]) if len(problems) == 1 else FieldErrors(problems)


def _unknown(field: str, name: str, shard_map: ShardMap) -> FieldError:
    return FieldError(field, f"{name!r} is not a shard of the map ({', '.join(shard_map.names)})")


# ---------------------------------------------------------------------------
# Reading a map (the catalog row, a TOML file) and writing it back.


def parse_shard_map(mapping: object) -> ShardMap:
    """A map from its plain form (what `mapping_of` gives, or TOML):

        epoch = 0                     # optional for a new map
        home = "a"
        [shards.a]
        locator = "db-a:5432/cronfleet"
        [[ranges]]
        partitions = "0-1023"
        shard = "a"

    The form's problems are reported together, each naming its field, then (once the
    form is right) the placement's, as `check` finds them. The map returned is in its
    stored form: shards by name, ranges in partition order, neighbours merged."""
    if not isinstance(mapping, Mapping):
        raise FieldError("shard map", "must be a table of epoch, home, shards and ranges")
    problems = [
        (str(key), f"is not a field of a shard map ({', '.join(_MAP_FIELDS)})")
        for key in mapping
        if key not in _MAP_FIELDS
    ]
    home = mapping.get("home")
    if not isinstance(home, str):
        problems.append(("home", "must name the shard that holds what has no partition"))
    shards = _parse_shards(mapping.get("shards"), problems)
    ranges = _parse_ranges(mapping.get("ranges"), problems)
    epoch = mapping.get("epoch", 0)
    if not _is_epoch(epoch):
        problems.append(("epoch", "must be a whole number >= 0"))
    elif isinstance(home, str) and not problems:
        given = ShardMap(epoch, home, shards, ranges)
        return _stored(given, given.owners)  # `owners` refuses it as `check` does
    raise _refusal(problems)


def _is_epoch(raw: object) -> TypeGuard[int]:
    return isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0


def _parse_shards(raw: object, problems: list[tuple[str, str]]) -> tuple[Shard, ...]:
    if not isinstance(raw, Mapping):
        problems.append(("shards", "must be a table of shards by name, each with a locator"))
        return ()
    shards = []
    for name, entry in raw.items():
        field = _shard_field(str(name))
        if not isinstance(entry, Mapping):
            problems.append((field, "must be a table with a locator"))
            continue
        problems += [
            (f"{field}.{key}", "is not a field of a shard (it has a locator only)")
            for key in entry
            if key != "locator"
        ]
        locator = entry.get("locator")
        if not isinstance(locator, str):
            problems.append((f"{field}.locator", f"is required: it {LOCATOR_RULE}"))
            continue
        shards.append(Shard(str(name), locator))
    return tuple(shards)


def _parse_ranges(raw: object, problems: list[tuple[str, str]]) -> tuple[PartitionRange, ...]:
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        problems.append(("ranges", "must be a list of tables, each with partitions and shard"))
        return ()
    ranges = []
    for i, entry in enumerate(raw):
        field = f"ranges[{i}]"
        if not isinstance(entry, Mapping):
            problems.append((field, "must be a table with partitions and shard"))
            continue
        problems += [
            (f"{field}.{key}", f"is not a field of a range ({', '.join(_RANGE_FIELDS)})")
            for key in entry
            if key not in _RANGE_FIELDS
        ]
        shard = entry.get("shard")
        if not isinstance(shard, str):
            problems.append((f"{field}.shard", "must name a shard of the map"))
        try:
            span = parse_partition_range(entry.get("partitions"), f"{field}.partitions")
        except FieldError as exc:
            problems += exc.problems
            continue
        if isinstance(shard, str):
            ranges.append(PartitionRange(span.start, span.stop - 1, shard))
    return tuple(ranges)


def mapping_of(shard_map: ShardMap) -> dict[str, object]:
    """The plain form `parse_shard_map` reads (for the catalog row and a TOML file)."""
    return {
        "epoch": shard_map.epoch,
        "home": shard_map.home,
        "shards": {s.name: {"locator": s.locator} for s in shard_map.shards},
        "ranges": [{"partitions": str(r), "shard": r.shard} for r in shard_map.ranges],
    }


def even_shard_map(shards: Mapping[str, str], home: str | None = None) -> ShardMap:
    """A new map (epoch 0) with the partitions split in contiguous, near-equal ranges
    over `shards` (name -> locator) in their order; home is the first unless named.
    What `cronfleet stack up --shards N` starts from; one shard holds everything."""
    names = list(shards)
    base, extra = divmod(PARTITION_COUNT, max(len(names), 1))
    ranges, first = [], 0
    for i, name in enumerate(names):
        size = base + (1 if i < extra else 0)
        if size:
            ranges.append(PartitionRange(first, first + size - 1, name))
        first += size
    if home is None:
        home = names[0] if names else ""
    given = ShardMap(
        0,
        home,
        tuple(Shard(n, shards[n]) for n in names),
        tuple(ranges),
    )
    return _stored(given, given.owners)


def _stored(shard_map: ShardMap, owners: Sequence[str]) -> ShardMap:
    return replace(
        shard_map,
        shards=tuple(sorted(shard_map.shards, key=lambda s: s.name)),
        ranges=_ranges_of(owners),
    )


def _ranges_of(owners: Sequence[str]) -> tuple[PartitionRange, ...]:
    """The fewest ranges that say `owners` (partition -> shard)."""
    ranges: list[PartitionRange] = []
    for p, shard in enumerate(owners):
        if ranges and ranges[-1].shard == shard:
            ranges[-1] = replace(ranges[-1], last=p)
        else:
            ranges.append(PartitionRange(p, p, shard))
    return tuple(ranges)


# ---------------------------------------------------------------------------
# Routing: every id leads to one shard without asking the others.


def shard_of_partition(shard_map: ShardMap, partition: int) -> str:
    if not 0 <= partition <= LAST_PARTITION:
        raise FieldError("partition", f"{partition} is not within 0-{LAST_PARTITION}")
    return shard_map.owners[partition]


def shard_of_job(shard_map: ShardMap, job_id: str) -> str:
    """A job's shard, which holds its triggers, runs, dead letters and audit entries."""
    return shard_map.owners[partition_of(job_id)]


def shard_of_queue(shard_map: ShardMap, tenant: str, queue: str) -> str:
    return shard_map.owners[partition_of_queue(tenant, queue)]


def shard_of_run_id(
    shard_map: ShardMap, run_id: str, partitioned_from_ms: int | None
) -> str | None:
    """A run's (and its dead letter's) shard; None for an id of the older layout, whose
    run the caller looks for on every shard."""
    partition = partition_of_run_id(run_id, partitioned_from_ms)
    return None if partition is None else shard_map.owners[partition]


def shard_of_task_id(shard_map: ShardMap, task_id: str) -> str | None:
    """A queue task's shard; None for a task id made before ids carried a partition."""
    partition = partition_of_task_id(task_id)
    return None if partition is None else shard_map.owners[partition]


def partitions_of_shard(shard_map: ShardMap, name: str) -> tuple[int, ...]:
    """The partitions `name` holds, ascending (what its scheduler nodes may lease)."""
    if name not in shard_map.names:
        raise _unknown("shard", name, shard_map)
    return tuple(p for p, owner in enumerate(shard_map.owners) if owner == name)


# ---------------------------------------------------------------------------
# Partition ranges as an operator writes them.


def parse_partition_range(text: object, field: str = "partitions") -> range:
    """`0-511` (both ends included) or `7`: the partitions a command names."""
    found = _RANGE.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise FieldError(field, f"{text!r} {RANGE_RULE}")
    first = int(found["first"])
    last = first if found["last"] is None else int(found["last"])
    if first > last:
        raise FieldError(field, f"{text!r}: its first partition is after its last")
    if last > LAST_PARTITION:
        raise FieldError(field, f"{text!r}: the partitions are 0 to {LAST_PARTITION}")
    return range(first, last + 1)


def format_partitions(partitions: Iterable[int]) -> str:
    """Partitions as the fewest spans: `0-3, 7, 9-10`."""
    spans: list[list[int]] = []
    for p in sorted(set(partitions)):
        if spans and spans[-1][1] == p - 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


# ---------------------------------------------------------------------------
# Moving partitions between shards.


def plan_move(shard_map: ShardMap, partitions: Iterable[int], to_shard: str) -> Move:
    """Move `partitions` to `to_shard`: those already there stay out of the move; a move
    that would change nothing, names no partition, one out of range or a shard the map
    does not have is refused."""
    owners = shard_map.owners
    if to_shard not in shard_map.names:
        raise _unknown("to", to_shard, shard_map)
    wanted = sorted(set(partitions))
    if not wanted:
        raise FieldError("partitions", "the move names no partition")
    outside = [p for p in wanted if not 0 <= p <= LAST_PARTITION]
    if outside:
        raise FieldError(
            "partitions",
            f"{format_partitions(outside)}: the partitions are 0 to {LAST_PARTITION}",
        )
    moving = [p for p in wanted if owners[p] != to_shard]
    if not moving:
        raise FieldError(
            "partitions",
            f"{format_partitions(wanted)} are on {to_shard} already: the move changes nothing",
        )
    sources: list[PartitionRange] = []
    for p in moving:
        last = sources[-1] if sources else None
        if last is not None and last.last == p - 1 and last.shard == owners[p]:
            sources[-1] = replace(last, last=p)
        else:
            sources.append(PartitionRange(p, p, owners[p]))
    return Move(shard_map.epoch, to_shard, tuple(sources))


def apply_move(shard_map: ShardMap, move: Move) -> ShardMap:
    """The map after `move`, at the next epoch. A move planned against another epoch is
    refused: the map changed since (another operator's move came first), so its plan
    (which partitions leave which shard) may be wrong; plan it again."""
    if move.epoch != shard_map.epoch:
        raise FieldError(
            "epoch",
            f"the move was planned at epoch {move.epoch} and the map is at epoch "
            f"{shard_map.epoch}: the map changed since; plan the move again",
        )
    owners = list(shard_map.owners)
    if move.to_shard not in shard_map.names:
        raise _unknown("to", move.to_shard, shard_map)
    for source in move.sources:
        for p in source.partitions:
            if owners[p] != source.shard:
                raise FieldError(
                    "partitions",
                    f"partition {p} is on {owners[p]}, not on {source.shard} as the move "
                    "says; plan the move again",
                )
            owners[p] = move.to_shard
    return replace(shard_map, epoch=shard_map.epoch + 1, ranges=_ranges_of(owners))


# ---------------------------------------------------------------------------
# Showing a map (`cronfleet shards show`).


def render_shard_map(shard_map: ShardMap) -> str:
    """One line per shard: its name, locator, partition count and ranges."""
    owners = shard_map.owners
    rows = [("shard", "locator", "partitions", "ranges")]
    for shard in sorted(shard_map.shards, key=lambda s: s.name):
        held = [p for p, owner in enumerate(owners) if owner == shard.name]
        name = f"{shard.name} (home)" if shard.name == shard_map.home else shard.name
        rows.append((name, shard.locator, str(len(held)), format_partitions(held) or "-"))
    name_w, locator_w, count_w = (max(len(row[i]) for row in rows) for i in (0, 1, 2))
    lines = [f"shard map at epoch {shard_map.epoch}, {len(rows) - 1} shards"]
    for name, locator, count, spans in rows:
        lines.append(f"{name:<{name_w}}  {locator:<{locator_w}}  {count:>{count_w}}  {spans}")
    return "\n".join(lines)
