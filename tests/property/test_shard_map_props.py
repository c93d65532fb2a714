"""The shard map over any valid map: every partition on exactly one shard, before and
after any move, which moves exactly the partitions it names; and the ids that carry a
partition give back their partition and instant and keep their time order."""

from __future__ import annotations

import uuid
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.core.errors import FieldError
from kit.core.ids import (
    MAX_RUN_MS,
    TASK_RANDOM_BITS,
    partition_of_run_id,
    partition_of_task_id,
    run_id,
    run_id_at,
    scheduled_ms_of,
)
from kit.core.ids import queue_task_id as task_id
from kit.core.partitions import PARTITION_COUNT, partition_of
from kit.core.shard_map import (
    ShardMap,
    apply_move,
    check,
    mapping_of,
    parse_shard_map,
    partitions_of_shard,
    plan_move,
    shard_of_partition,
    shard_of_run_id,
    shard_of_task_id,
)

names = st.lists(
    st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=6, unique=True
)
ms_values = st.integers(min_value=0, max_value=MAX_RUN_MS)
job_ids = st.uuids().map(str)


@st.composite
def plain_maps(draw: st.DrawFn) -> dict[str, Any]:
    """Any valid map in its plain form: contiguous ranges in any order, any shard each
    (a shard may hold none, or several ranges side by side)."""
    shards = draw(names)
    cuts = sorted(draw(st.sets(st.integers(1, PARTITION_COUNT - 1), max_size=24)))
    bounds = [0, *cuts, PARTITION_COUNT]
    ranges = [
        {"partitions": f"{a}-{b - 1}", "shard": draw(st.sampled_from(shards))}
        for a, b in pairwise(bounds)
    ]
    return {
        "epoch": draw(st.integers(0, 10**9)),
        "home": draw(st.sampled_from(shards)),
        "shards": {
            n: {"locator": f"db-{i}.internal:{5432 + i}/cronfleet"} for i, n in enumerate(shards)
        },
        "ranges": draw(st.permutations(ranges)),
    }


def spans(raw: dict[str, Any]) -> list[tuple[int, int, str]]:
    out = []
    for r in raw["ranges"]:
        first, _, last = r["partitions"].partition("-")
        out.append((int(first), int(last or first), r["shard"]))
    return out


@given(plain_maps())
def test_every_partition_is_on_exactly_one_shard(raw: dict[str, Any]) -> None:
    m = parse_shard_map(raw)
    check(m)
    given_spans = spans(raw)
    for p in range(PARTITION_COUNT):
        covering = [shard for first, last, shard in given_spans if first <= p <= last]
        assert covering == [shard_of_partition(m, p)]
    held = [p for name in m.names for p in partitions_of_shard(m, name)]
    assert sorted(held) == list(range(PARTITION_COUNT))  # each once
    # stored: in order, contiguous, neighbours on different shards
    assert m.ranges[0].first == 0 and m.ranges[-1].last == PARTITION_COUNT - 1
    for a, b in pairwise(m.ranges):
        assert b.first == a.last + 1 and a.shard != b.shard
    assert parse_shard_map(mapping_of(m)) == m
    assert (m.epoch, m.home, set(m.names)) == (raw["epoch"], raw["home"], set(raw["shards"]))


@given(plain_maps(), st.data())
def test_a_map_missing_a_range_or_doubling_one_is_refused(
    raw: dict[str, Any], data: st.DataObject
) -> None:
    ranges = raw["ranges"]
    i = data.draw(st.integers(0, len(ranges) - 1))
    first, last, _ = spans(raw)[i]
    with pytest.raises(FieldError) as missing:
        parse_shard_map(raw | {"ranges": ranges[:i] + ranges[i + 1 :]})
    gap = f"{first}" if first == last else f"{first}-{last}"
    assert missing.value.problems == [("ranges", f"partitions {gap} are on no shard")]
    p = data.draw(st.integers(first, last))
    other = data.draw(st.sampled_from(sorted(raw["shards"])))
    with pytest.raises(FieldError) as twice:
        parse_shard_map(raw | {"ranges": [*ranges, {"partitions": str(p), "shard": other}]})
    assert twice.value.problems == [
        (f"ranges[{len(ranges)}]", f"partitions {p} are in ranges[{i}] too")
    ]


@given(plain_maps(), st.data())
def test_a_move_moves_exactly_the_partitions_it_names(
    raw: dict[str, Any], data: st.DataObject
) -> None:
    m = parse_shard_map(raw)
    to = data.draw(st.sampled_from(m.names))
    named = data.draw(
        st.one_of(
            st.sets(st.integers(0, PARTITION_COUNT - 1), min_size=1, max_size=40),
            st.tuples(st.integers(0, PARTITION_COUNT - 1), st.integers(0, 300)).map(
                lambda t: set(range(t[0], min(t[0] + t[1], PARTITION_COUNT - 1) + 1))
            ),
        )
    )
    before = {p: shard_of_partition(m, p) for p in range(PARTITION_COUNT)}
    leaving = sorted(p for p in named if before[p] != to)
    if not leaving:
        with pytest.raises(FieldError, match="the move changes nothing"):
            plan_move(m, named, to)
        return
    move = plan_move(m, named, to)
    assert list(move.partitions) == leaving
    assert all(before[p] == r.shard for r in move.sources for p in r.partitions)
    after = apply_move(m, move)
    check(after)
    assert after.epoch == m.epoch + 1
    assert (after.home, after.shards) == (m.home, m.shards)
    for p in range(PARTITION_COUNT):
        assert shard_of_partition(after, p) == (to if p in named else before[p])
    for a, b in pairwise(after.ranges):
        assert b.first == a.last + 1 and a.shard != b.shard
    with pytest.raises(FieldError, match="plan the move again"):
        apply_move(after, move)  # the fence: planned at the epoch before


@given(plain_maps(), job_ids, ms_values, ms_values)
def test_a_run_id_gives_back_its_partition_and_instant(
    raw: dict[str, Any], job: str, ms: int, cut: int
) -> None:
    m: ShardMap = parse_shard_map(raw)
    rid = run_id_at(job, ms, cut)
    assert scheduled_ms_of(rid) == ms
    assert run_id_at(job, ms, cut) == rid  # a pure function of (job, instant)
    if ms >= cut:
        assert partition_of_run_id(rid, cut) == partition_of(job)
        assert shard_of_run_id(m, rid, cut) == shard_of_partition(m, partition_of(job))
    else:
        assert rid == run_id(job, ms)  # the old layout, as before the cut-over
        assert partition_of_run_id(rid, cut) is None
        assert shard_of_run_id(m, rid, cut) is None


@given(job_ids, job_ids, ms_values, ms_values, st.one_of(st.none(), ms_values))
def test_run_ids_sort_as_their_instants_in_either_layout(
    a: str, b: str, ms_a: int, ms_b: int, cut: int | None
) -> None:
    if ms_a < ms_b:
        assert uuid.UUID(run_id_at(a, ms_a, cut)) < uuid.UUID(run_id_at(b, ms_b, cut))
        assert run_id_at(a, ms_a, cut) < run_id_at(b, ms_b, cut)  # as text too


@given(
    plain_maps(), st.integers(0, PARTITION_COUNT - 1), st.integers(0, (1 << TASK_RANDOM_BITS) - 1)
)
def test_a_task_id_gives_back_its_partition(raw: dict[str, Any], partition: int, rand: int) -> None:
    m = parse_shard_map(raw)
    tid = task_id(partition, rand)
    assert partition_of_task_id(tid) == partition
    assert shard_of_task_id(m, tid) == shard_of_partition(m, partition)
    assert uuid.UUID(tid).version == 8
    assert task_id(partition, rand) == tid
    if rand:
        assert task_id(partition, rand - 1) != tid
