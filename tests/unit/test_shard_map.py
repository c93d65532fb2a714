"""The shard map (kit.core.shard_map) and the ids that lead to one shard (kit.core.ids):
reading and refusing a map, routing every id, planning and applying a move, showing it."""

from __future__ import annotations

import tomllib
import uuid
from datetime import UTC, datetime

import pytest

from kit.core.errors import FieldError, FieldErrors
from kit.core.ids import (
    MAX_RUN_MS,
    TASK_RANDOM_BITS,
    partition_of_run_id,
    partition_of_task_id,
    partitioned_run_id,
    queue_task_id,
    run_id,
    run_id_at,
    scheduled_ms_of,
)
from kit.core.partitions import PARTITION_COUNT, partition_of, partition_of_queue
from kit.core.shard_map import (
    Move,
    PartitionRange,
    Shard,
    ShardMap,
    apply_move,
    check,
    even_shard_map,
    format_partitions,
    mapping_of,
    parse_partition_range,
    parse_shard_map,
    partitions_of_shard,
    plan_move,
    render_shard_map,
    shard_of_job,
    shard_of_partition,
    shard_of_queue,
    shard_of_run_id,
    shard_of_task_id,
)
from kit.core.timeutil import to_epoch_ms

A, B, C = "127.0.0.1:55432/cronfleet", "127.0.0.1:55433/cronfleet", "db-c.internal:5432/cf"
JOB = "0b5c7a3e-2f0d-4c55-8d0e-0f3c3b0f1a11"
PARTITION_BITS = 0x3FF << 66


def two() -> ShardMap:
    """a holds 0-511 and is home, b holds 512-1023."""
    return even_shard_map({"a": A, "b": B})


def plain(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "epoch": 4,
        "home": "a",
        "shards": {"a": {"locator": A}, "b": {"locator": B}},
        "ranges": [
            {"partitions": "0-511", "shard": "a"},
            {"partitions": "512-1023", "shard": "b"},
        ],
    }
    return base | changes


def problems(exc: pytest.ExceptionInfo[FieldError]) -> list[tuple[str, str]]:
    """The problems of a refusal: one is a FieldError, several a FieldErrors."""
    found = exc.value.problems
    assert type(exc.value) is (FieldError if len(found) == 1 else FieldErrors)
    return found


# ---------------------------------------------------------------------------
# Reading a map


def test_a_map_is_read_from_toml_in_its_stored_form() -> None:
    text = """
        epoch = 7
        home = "b"
        [shards.b]
        locator = "127.0.0.1:55433/cronfleet"
        [shards.a]
        locator = "127.0.0.1:55432/cronfleet"
        [[ranges]]
        partitions = "600-1023"
        shard = "a"
        [[ranges]]
        partitions = "0-99"
        shard = "a"
        [[ranges]]
        partitions = "100-599"
        shard = "b"
    """
    m = parse_shard_map(tomllib.loads(text))
    assert m == ShardMap(
        7,
        "b",
        (Shard("a", A), Shard("b", B)),  # by name
        (  # in partition order
            PartitionRange(0, 99, "a"),
            PartitionRange(100, 599, "b"),
            PartitionRange(600, 1023, "a"),
        ),
    )
    assert m.locator("b") == B


def test_neighbouring_ranges_of_one_shard_are_merged_and_epoch_defaults_to_0() -> None:
    raw = plain(
        ranges=[
            {"partitions": "0-9", "shard": "a"},
            {"partitions": "10", "shard": "a"},
            {"partitions": "11-1023", "shard": "b"},
        ]
    )
    del raw["epoch"]
    m = parse_shard_map(raw)
    assert m.epoch == 0
    assert m.ranges == (PartitionRange(0, 10, "a"), PartitionRange(11, 1023, "b"))


def test_the_plain_form_reads_back_as_the_same_map() -> None:
    m = parse_shard_map(plain())
    assert mapping_of(m) == plain()
    assert parse_shard_map(mapping_of(m)) == m
    one = even_shard_map({"a": A})
    assert mapping_of(one)["ranges"] == [{"partitions": "0-1023", "shard": "a"}]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (["a"], [("shard map", "must be a table of epoch, home, shards and ranges")]),
        (
            plain(epochs=1),
            [("epochs", "is not a field of a shard map (epoch, home, shards, ranges)")],
        ),
        (plain(epoch=-1), [("epoch", "must be a whole number >= 0")]),
        (plain(epoch=True), [("epoch", "must be a whole number >= 0")]),
        (plain(epoch="1"), [("epoch", "must be a whole number >= 0")]),
        (plain(home=None), [("home", "must name the shard that holds what has no partition")]),
        (
            plain(shards=[A]),
            [("shards", "must be a table of shards by name, each with a locator")],
        ),
        (plain(shards={"a": A}), [("shards.a", "must be a table with a locator")]),
        (
            plain(shards={"a": {"locator": A, "port": 1}, "b": {"locator": B}}),
            [("shards.a.port", "is not a field of a shard (it has a locator only)")],
        ),
        (
            plain(shards={"a": {}, "b": {"locator": B}}),
            [
                (
                    "shards.a.locator",
                    "is required: it must be host:port/dbname, no user or password "
                    "(the environment has those)",
                )
            ],
        ),
        (
            plain(ranges="0-1023"),
            [("ranges", "must be a list of tables, each with partitions and shard")],
        ),
        (
            plain(ranges={"partitions": "0-1023"}),
            [("ranges", "must be a list of tables, each with partitions and shard")],
        ),
        (plain(ranges=["0-1023"]), [("ranges[0]", "must be a table with partitions and shard")]),
        (
            plain(ranges=[{"partitions": "0-1023", "shard": "a", "weight": 1}]),
            [("ranges[0].weight", "is not a field of a range (partitions, shard)")],
        ),
        (
            plain(ranges=[{"partitions": "0-1023"}]),
            [("ranges[0].shard", "must name a shard of the map")],
        ),
        (
            plain(ranges=[{"partitions": "0-1023", "shard": "a"}, {"partitions": "x"}]),
            [
                ("ranges[1].shard", "must name a shard of the map"),
                (
                    "ranges[1].partitions",
                    "'x' must be A-B or one partition, within 0-1023 (e.g. 0-511)",
                ),
            ],
        ),
    ],
)
def test_a_malformed_map_is_refused_naming_each_field(
    raw: object, expected: list[tuple[str, str]]
) -> None:
    with pytest.raises(FieldError) as exc:
        parse_shard_map(raw)
    assert problems(exc) == expected


def test_every_problem_of_the_form_is_reported_at_once() -> None:
    with pytest.raises(FieldErrors) as exc:
        parse_shard_map({"epoch": -1, "shards": {}, "ranges": [], "x": 1})
    assert problems(exc) == [
        ("x", "is not a field of a shard map (epoch, home, shards, ranges)"),
        ("home", "must name the shard that holds what has no partition"),
        ("epoch", "must be a whole number >= 0"),
    ]


def test_a_bad_entry_does_not_hide_the_ones_after_it() -> None:
    with pytest.raises(FieldErrors) as exc:
        parse_shard_map(
            plain(
                shards={"a": A, "b": {}, "c": {"locator": C, "x": 1}},
                ranges=[
                    "0-1",
                    {"partitions": "x", "shard": "a"},
                    {"partitions": "2-1023", "shard": 5},
                ],
            )
        )
    rule = "must be host:port/dbname, no user or password (the environment has those)"
    assert problems(exc) == [
        ("shards.a", "must be a table with a locator"),
        ("shards.b.locator", f"is required: it {rule}"),
        ("shards.c.x", "is not a field of a shard (it has a locator only)"),
        ("ranges[0]", "must be a table with partitions and shard"),
        ("ranges[1].partitions", "'x' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        ("ranges[2].shard", "must name a shard of the map"),
    ]


def test_a_right_form_is_then_checked_for_its_placement() -> None:
    raw = plain(
        shards={"a": {"locator": A}},
        ranges=[{"partitions": "0-600", "shard": "a"}, {"partitions": "500-1000", "shard": "b"}],
    )
    with pytest.raises(FieldErrors) as exc:
        parse_shard_map(raw)
    assert problems(exc) == [
        ("ranges[1].shard", "'b' is not a shard of the map"),
        ("ranges[1]", "partitions 500-600 are in ranges[0] too"),
        ("ranges", "partitions 1001-1023 are on no shard"),
    ]


# ---------------------------------------------------------------------------
# Checking a map


def valid(**changes: object) -> ShardMap:
    base = two()
    return ShardMap(
        int(changes.get("epoch", base.epoch)),  # type: ignore[call-overload]
        str(changes.get("home", base.home)),
        changes.get("shards", base.shards),  # type: ignore[arg-type]
        changes.get("ranges", base.ranges),  # type: ignore[arg-type]
    )


def refusal(m: ShardMap) -> list[tuple[str, str]]:
    with pytest.raises(FieldError) as exc:
        check(m)
    found = problems(exc)
    with pytest.raises(FieldError) as routed:  # routing refuses it the same way
        shard_of_partition(m, 0)
    assert problems(routed) == found
    return found


def test_a_valid_map_passes() -> None:
    check(two())
    check(even_shard_map({f"s{i}": A for i in range(PARTITION_COUNT)}))  # one each


def test_an_empty_map_is_refused() -> None:
    assert refusal(ShardMap(0, "a", (), ())) == [
        ("shards", "the map names no shard: it needs at least one"),
        ("home", "'a' is not a shard of the map"),
        ("ranges", "partitions 0-1023 are on no shard"),
    ]
    with pytest.raises(FieldErrors) as exc:
        even_shard_map({})
    assert problems(exc)[1] == ("home", "'' is not a shard of the map")


def test_a_partition_on_no_shard_is_refused() -> None:
    ranges = (PartitionRange(0, 99, "a"), PartitionRange(101, 1022, "b"))
    assert refusal(valid(ranges=ranges)) == [("ranges", "partitions 100, 1023 are on no shard")]


def test_a_partition_on_two_shards_is_refused_naming_both_ranges() -> None:
    ranges = (
        PartitionRange(0, 511, "a"),
        PartitionRange(512, 1023, "b"),
        PartitionRange(5, 5, "b"),
        PartitionRange(500, 520, "a"),
    )
    assert refusal(valid(ranges=ranges)) == [
        ("ranges[2]", "partitions 5 are in ranges[0] too"),
        ("ranges[3]", "partitions 500-511 are in ranges[0] too"),
        ("ranges[3]", "partitions 512-520 are in ranges[1] too"),
    ]


def test_a_range_naming_an_unknown_shard_is_refused() -> None:
    ranges = (PartitionRange(0, 511, "a"), PartitionRange(512, 1023, "c"))
    assert refusal(valid(ranges=ranges)) == [("ranges[1].shard", "'c' is not a shard of the map")]


@pytest.mark.parametrize(
    "first_last", [(-1, 511), (0, 1024), (600, 599)], ids=["below", "above", "reversed"]
)
def test_a_range_outside_the_partitions_is_refused(first_last: tuple[int, int]) -> None:
    first, last = first_last
    ranges = (PartitionRange(first, last, "a"), PartitionRange(512, 1023, "b"))
    assert refusal(valid(ranges=ranges)) == [
        (
            "ranges[0].partitions",
            f"{first}-{last} must be A-B or one partition, within 0-1023 (e.g. 0-511)",
        ),
        ("ranges", "partitions 0-511 are on no shard"),  # the next range is still placed
    ]
    one = (PartitionRange(1024, 1024, "a"), *valid().ranges)
    assert refusal(valid(ranges=one))[0] == (
        "ranges[0].partitions",
        "1024 must be A-B or one partition, within 0-1023 (e.g. 0-511)",
    )


def test_the_last_and_first_partitions_are_in_range() -> None:
    ranges = (
        PartitionRange(0, 0, "a"),
        PartitionRange(1, 1022, "b"),
        PartitionRange(1023, 1023, "a"),
    )
    check(valid(ranges=ranges))


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("A", "shards['A']"),
        ("1a", "shards['1a']"),
        ("a-b", "shards['a-b']"),
        ("", "shards['']"),
        ("a" * 64, f"shards[{'a' * 64!r}]"),
        ("a b", "shards['a b']"),
        ("é", "shards['é']"),
    ],
)
def test_a_shard_name_that_is_not_a_plain_identifier_is_refused(name: str, field: str) -> None:
    m = valid(
        home=name,
        shards=(Shard(name, A), Shard("b", B)),
        ranges=(PartitionRange(0, 511, name), PartitionRange(512, 1023, "b")),
    )
    assert refusal(m) == [
        (field, "must be a plain identifier: a lower-case letter, then up to 62 of a-z, 0-9, _")
    ]


def test_plain_names_are_taken() -> None:
    for name in ("a", "z", "a" * 63, "shard_0", "s9_x"):
        check(even_shard_map({name: A}))


def test_a_shard_named_twice_is_refused() -> None:
    m = valid(shards=(Shard("a", A), Shard("b", B), Shard("a", C)))
    assert refusal(m) == [("shards.a", "is named twice")]


def test_too_many_shards_are_refused() -> None:
    names = {f"s{i}": A for i in range(PARTITION_COUNT + 1)}
    m = ShardMap(0, "s0", tuple(Shard(n, A) for n in names), (PartitionRange(0, 1023, "s0"),))
    assert refusal(m) == [("shards", "the map names 1025 shards, at most 1024")]


def test_a_negative_epoch_and_an_unknown_home_are_refused() -> None:
    assert refusal(valid(epoch=-1)) == [("epoch", "must be a whole number >= 0")]
    assert refusal(valid(home="c")) == [("home", "'c' is not a shard of the map")]


@pytest.mark.parametrize(
    "locator",
    [
        "127.0.0.1:5432/cronfleet",
        "db-a.example.com:65535/cronfleet",
        "[::1]:1/cronfleet",
        "[fe80::1:2]:5432/_db9",
        "h:5432/" + "d" * 63,
        "h" * 253 + ":5432/d",
    ],
)
def test_a_locator_names_a_server_and_a_database(locator: str) -> None:
    check(even_shard_map({"a": locator}))


@pytest.mark.parametrize(
    "locator",
    [
        "",
        "db:5432",
        "db/cronfleet",
        "user:secret@db:5432/cronfleet",
        "postgresql://db:5432/cronfleet",
        "db:0/cronfleet",
        "db:65536/cronfleet",
        "db:123456/cronfleet",
        "db:5432/cron fleet",
        " db:5432/cronfleet",
        "db:5432/cronfleet\n",
        "-db:5432/cronfleet",
        "db-:5432/cronfleet",
        "db:5432/9db",
        "db:5432/cronfleet?password=x",
        "h:5432/" + "d" * 64,
        "h" * 254 + ":5432/d",
        "[::1:5432/cronfleet",
        "[]:5432/cronfleet",
        "[" + "1" * 46 + "]:5432/cronfleet",
    ],
)
def test_a_locator_with_credentials_or_out_of_form_is_refused(locator: str) -> None:
    m = valid(shards=(Shard("a", locator), Shard("b", B)))
    assert refusal(m) == [
        (
            "shards.a.locator",
            f"{locator!r} must be host:port/dbname, no user or password "
            "(the environment has those)",
        )
    ]


# ---------------------------------------------------------------------------
# A new map


def test_an_even_map_splits_the_partitions_in_contiguous_near_equal_ranges() -> None:
    m = even_shard_map({"c": C, "a": A, "b": B})
    assert m.epoch == 0 and m.home == "c"
    assert m.names == ("a", "b", "c")
    assert m.ranges == (
        PartitionRange(0, 341, "c"),
        PartitionRange(342, 682, "a"),
        PartitionRange(683, 1023, "b"),
    )
    assert even_shard_map({"a": A, "b": B}, home="b").home == "b"
    one = even_shard_map({"a": A})
    assert one.ranges == (PartitionRange(0, 1023, "a"),) and one.home == "a"


def test_shards_past_the_partitions_hold_none() -> None:
    names = {f"s{i}": A for i in range(PARTITION_COUNT)}
    m = even_shard_map(names)
    assert all(len(partitions_of_shard(m, n)) == 1 for n in names)


# ---------------------------------------------------------------------------
# Routing


def test_a_partition_is_on_the_shard_of_its_range() -> None:
    m = two()
    assert [shard_of_partition(m, p) for p in (0, 511, 512, 1023)] == ["a", "a", "b", "b"]
    for p in (-1, 1024):
        with pytest.raises(FieldError) as exc:
            shard_of_partition(m, p)
        assert problems(exc) == [("partition", f"{p} is not within 0-1023")]


def test_a_job_and_a_queue_are_on_their_partitions_shard() -> None:
    m = two()
    jobs = [str(uuid.UUID(int=i * 7919 + 1)) for i in range(64)]
    for job in jobs:
        assert shard_of_job(m, job) == ("a" if partition_of(job) < 512 else "b")
    assert {shard_of_job(m, j) for j in jobs} == {"a", "b"}
    queues = [("acme", f"q{i}") for i in range(64)]
    for tenant, queue in queues:
        expected = "a" if partition_of(f"{tenant}/{queue}") < 512 else "b"
        assert shard_of_queue(m, tenant, queue) == expected
    assert {shard_of_queue(m, t, q) for t, q in queues} == {"a", "b"}
    assert partition_of_queue("acme", "emails") == partition_of("acme/emails")


def test_a_partitioned_run_id_leads_to_its_jobs_shard_and_an_old_one_to_none() -> None:
    m = two()
    cut = to_epoch_ms(datetime(2027, 1, 1, tzinfo=UTC))
    for i in range(64):
        job = str(uuid.UUID(int=i * 104729 + 3))
        new = run_id_at(job, cut, cut)
        assert shard_of_run_id(m, new, cut) == shard_of_job(m, job)
        assert shard_of_run_id(m, run_id_at(job, cut - 1, cut), cut) is None
    assert shard_of_run_id(m, str(uuid.uuid5(uuid.NAMESPACE_URL, "x")), cut) is None


def test_a_task_id_leads_to_its_queues_shard_and_an_old_one_to_none() -> None:
    m = two()
    assert shard_of_task_id(m, queue_task_id(3, 12345)) == "a"
    assert shard_of_task_id(m, queue_task_id(700, 12345)) == "b"
    assert shard_of_task_id(m, str(uuid.UUID(int=1 << 120, version=4))) is None


def test_the_partitions_of_a_shard() -> None:
    m = apply_move(two(), plan_move(two(), [0, 700], "b"))
    assert partitions_of_shard(m, "a") == tuple(range(1, 512))
    assert partitions_of_shard(m, "b") == (0, *range(512, 1024))
    with pytest.raises(FieldError) as exc:
        partitions_of_shard(m, "c")
    assert problems(exc) == [("shard", "'c' is not a shard of the map (a, b)")]
    with pytest.raises(FieldError) as exc:
        m.locator("c")
    assert problems(exc) == [("shard", "'c' is not a shard of the map (a, b)")]


# ---------------------------------------------------------------------------
# Partition ranges on a command line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-511", range(0, 512)),
        ("512-1023", range(512, 1024)),
        ("7", range(7, 8)),
        ("0", range(0, 1)),
        ("1023", range(1023, 1024)),
        ("5-5", range(5, 6)),
        ("0007-0010", range(7, 11)),
    ],
)
def test_a_partition_range_is_read(text: str, expected: range) -> None:
    assert parse_partition_range(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "'' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        ("a-b", "'a-b' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        ("1-", "'1-' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        ("-1", "'-1' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        (" 1-2", "' 1-2' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        ("1-2 ", "'1-2 ' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        ("1..2", "'1..2' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        ("01023", "'01023' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        ("٣", "'٣' must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        (5, "5 must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        (None, "None must be A-B or one partition, within 0-1023 (e.g. 0-511)"),
        ("9-3", "'9-3': its first partition is after its last"),
        ("1024", "'1024': the partitions are 0 to 1023"),
        ("0-1024", "'0-1024': the partitions are 0 to 1023"),
    ],
)
def test_a_bad_partition_range_is_refused_with_its_reason(text: object, reason: str) -> None:
    with pytest.raises(FieldError) as exc:
        parse_partition_range(text, "--partitions")
    assert problems(exc) == [("--partitions", reason)]


def test_a_range_error_names_the_partitions_field_by_default() -> None:
    with pytest.raises(FieldError) as exc:
        parse_partition_range("x")
    assert exc.value.field == "partitions"


def test_partitions_are_written_as_the_fewest_spans() -> None:
    assert format_partitions([9, 0, 1, 2, 3, 7, 10, 3]) == "0-3, 7, 9-10"
    assert format_partitions([]) == ""
    assert format_partitions(range(1024)) == "0-1023"


# ---------------------------------------------------------------------------
# Moves


def test_a_move_names_where_each_partition_leaves_from() -> None:
    m = even_shard_map({"a": A, "b": B, "c": C})  # a 0-341, b 342-682, c 683-1023
    move = plan_move(m, range(300, 401), "c")
    assert move == Move(0, "c", (PartitionRange(300, 341, "a"), PartitionRange(342, 400, "b")))
    assert move.partitions == tuple(range(300, 401))
    moved = apply_move(m, move)
    assert moved.epoch == 1
    assert moved.ranges == (
        PartitionRange(0, 299, "a"),
        PartitionRange(300, 400, "c"),
        PartitionRange(401, 682, "b"),
        PartitionRange(683, 1023, "c"),
    )
    assert (moved.home, moved.shards) == (m.home, m.shards)


def test_a_move_leaves_out_what_is_there_already_and_splits_at_gaps() -> None:
    m = two()
    move = plan_move(m, [510, 511, 512, 513, 5, 7, 511], "b")
    assert move.sources == (
        PartitionRange(5, 5, "a"),
        PartitionRange(7, 7, "a"),
        PartitionRange(510, 511, "a"),
    )
    moved = apply_move(m, move)
    assert moved.ranges == (
        PartitionRange(0, 4, "a"),
        PartitionRange(5, 5, "b"),
        PartitionRange(6, 6, "a"),
        PartitionRange(7, 7, "b"),
        PartitionRange(8, 509, "a"),
        PartitionRange(510, 1023, "b"),
    )
    assert mapping_of(moved)["ranges"][1] == {"partitions": "5", "shard": "b"}


def test_a_move_may_empty_a_shard_and_fill_it_again() -> None:
    m = two()
    emptied = apply_move(m, plan_move(m, range(512, 1024), "a"))
    assert emptied.ranges == (PartitionRange(0, 1023, "a"),)
    assert partitions_of_shard(emptied, "b") == ()
    check(emptied)
    refilled = apply_move(emptied, plan_move(emptied, range(512, 1024), "b"))
    assert refilled == replace_epoch(m, 2)


def replace_epoch(m: ShardMap, epoch: int) -> ShardMap:
    return ShardMap(epoch, m.home, m.shards, m.ranges)


def test_a_move_to_an_unknown_shard_is_refused() -> None:
    with pytest.raises(FieldError) as exc:
        plan_move(two(), [1], "c")
    assert problems(exc) == [("to", "'c' is not a shard of the map (a, b)")]


def test_a_move_naming_no_partition_or_one_out_of_range_is_refused() -> None:
    with pytest.raises(FieldError) as exc:
        plan_move(two(), [], "b")
    assert problems(exc) == [("partitions", "the move names no partition")]
    with pytest.raises(FieldError) as exc:
        plan_move(two(), [-2, -1, 0, 1023, 1024, 1025, 2000], "b")
    assert problems(exc) == [("partitions", "-2--1, 1024-1025, 2000: the partitions are 0 to 1023")]


def test_a_move_that_changes_nothing_is_refused() -> None:
    with pytest.raises(FieldError) as exc:
        plan_move(two(), range(512, 1024), "b")
    assert problems(exc) == [("partitions", "512-1023 are on b already: the move changes nothing")]


def test_a_move_planned_at_another_epoch_is_refused() -> None:
    m = two()
    first, second = plan_move(m, [0], "b"), plan_move(m, [1], "b")
    after = apply_move(m, first)
    with pytest.raises(FieldError) as exc:
        apply_move(after, second)
    assert problems(exc) == [
        (
            "epoch",
            "the move was planned at epoch 0 and the map is at epoch 1: the map changed "
            "since; plan the move again",
        )
    ]
    with pytest.raises(FieldError):
        apply_move(after, first)  # nor applied twice
    assert apply_move(after, plan_move(after, [1], "b")).epoch == 2


def test_a_move_whose_sources_are_not_the_maps_is_refused() -> None:
    m = two()
    wrong = Move(0, "b", (PartitionRange(3, 4, "a"), PartitionRange(600, 600, "a")))
    with pytest.raises(FieldError) as exc:
        apply_move(m, wrong)
    assert problems(exc) == [
        ("partitions", "partition 600 is on b, not on a as the move says; plan the move again")
    ]
    with pytest.raises(FieldError) as exc:
        apply_move(m, Move(0, "c", (PartitionRange(3, 4, "a"),)))
    assert problems(exc) == [("to", "'c' is not a shard of the map (a, b)")]


def test_a_move_on_a_bad_map_is_refused_as_check_refuses_it() -> None:
    bad = ShardMap(0, "a", (Shard("a", A),), (PartitionRange(0, 10, "a"),))
    with pytest.raises(FieldError, match="partitions 11-1023 are on no shard"):
        plan_move(bad, [0], "a")
    with pytest.raises(FieldError, match="partitions 11-1023 are on no shard"):
        apply_move(bad, Move(0, "a", (PartitionRange(0, 0, "a"),)))


# ---------------------------------------------------------------------------
# Showing a map


def test_a_map_is_shown_one_line_per_shard() -> None:
    m = even_shard_map({"a": A, "b": B, "cc": C}, home="b")
    m = apply_move(m, plan_move(m, [*range(300, 401), 1000], "cc"))
    m = apply_move(m, plan_move(m, range(683, 1024), "a"))
    m = apply_move(m, plan_move(m, range(300, 401), "a"))
    assert render_shard_map(m) == "\n".join(
        [
            "shard map at epoch 3, 3 shards",
            "shard     locator                    partitions  ranges",
            "a         127.0.0.1:55432/cronfleet         742  0-400, 683-1023",
            "b (home)  127.0.0.1:55433/cronfleet         282  401-682",
            "cc        db-c.internal:5432/cf               0  -",
        ]
    )


# ---------------------------------------------------------------------------
# Ids that carry their partition (kit.core.ids)


def test_a_partitioned_run_id_is_the_old_id_with_the_partition_in_bits_75_to_66() -> None:
    for ms in (0, 1, to_epoch_ms(datetime(2027, 3, 1, 9, 30, tzinfo=UTC)), MAX_RUN_MS):
        for partition in (0, 1, 517, 1023):
            new, old = uuid.UUID(partitioned_run_id(JOB, ms, partition)), uuid.UUID(run_id(JOB, ms))
            assert new.int == (old.int & ~PARTITION_BITS) | partition << 66
            assert new.version == 8 and new.variant == uuid.RFC_4122
            assert scheduled_ms_of(str(new)) == ms
            assert partition_of_run_id(str(new), ms) == partition
    at = datetime(2027, 3, 1, tzinfo=UTC)
    assert partitioned_run_id(JOB, at, 9) == partitioned_run_id(JOB, to_epoch_ms(at), 9)


def test_a_run_id_outside_its_bounds_is_refused() -> None:
    for partition in (-1, 1024):
        with pytest.raises(
            ValueError, match=rf"^a partition must be within 0\.\.1023, not {partition}$"
        ):
            partitioned_run_id(JOB, 0, partition)
    for ms in (-1, MAX_RUN_MS + 1):
        with pytest.raises(ValueError, match=r"within 0\.\.281474976710655 epoch ms"):
            partitioned_run_id(JOB, ms, 0)
        with pytest.raises(ValueError, match=r"within 0\.\.281474976710655 epoch ms"):
            run_id_at(JOB, ms, 0)


def test_the_layout_follows_the_instant_not_the_clock() -> None:
    cut = to_epoch_ms(datetime(2027, 1, 1, tzinfo=UTC))
    p = partition_of(JOB)
    assert run_id_at(JOB, cut - 1, cut) == run_id(JOB, cut - 1)  # a re-fire keeps its id
    assert run_id_at(JOB, cut, cut) == partitioned_run_id(JOB, cut, p)
    assert run_id_at(JOB, cut, None) == run_id(JOB, cut)  # no cut-over yet
    at = datetime(2027, 1, 1, tzinfo=UTC)
    assert run_id_at(JOB, at, cut) == partitioned_run_id(JOB, cut, p)
    new = run_id_at(JOB, cut, cut)
    assert partition_of_run_id(new, cut) == p
    assert partition_of_run_id(new, cut + 1) is None  # read as scheduled before the cut-over
    assert partition_of_run_id(new, None) is None
    assert partition_of_run_id(run_id(JOB, cut - 1), cut) is None


def test_a_version_5_run_id_carries_no_partition() -> None:
    old = str(uuid.uuid5(uuid.NAMESPACE_URL, "x"))
    assert partition_of_run_id(old, 0) is None


def test_a_task_id_carries_its_partition_and_its_random_bits() -> None:
    bits = (1 << TASK_RANDOM_BITS) - 1
    for partition in (0, 1, 700, 1023):
        for rand in (0, 1, 0x1234_5678_9ABC_DEF0_1234_5678_9ABC, bits):
            tid = uuid.UUID(queue_task_id(partition, rand))
            assert tid.version == 8 and tid.variant == uuid.RFC_4122
            assert partition_of_task_id(str(tid)) == partition
            v = tid.int
            assert (v >> 80) << 64 | ((v >> 64) & 3) << 62 | v & ((1 << 62) - 1) == rand
    assert TASK_RANDOM_BITS == 112
    assert partition_of_task_id(str(uuid.UUID(int=(1 << 128) - 1, version=4))) is None


def test_a_task_id_outside_its_bounds_is_refused() -> None:
    for partition in (-1, 1024):
        with pytest.raises(
            ValueError, match=rf"^a partition must be within 0\.\.1023, not {partition}$"
        ):
            queue_task_id(partition, 0)
    for rand in (-1, 1 << TASK_RANDOM_BITS):
        with pytest.raises(
            ValueError, match=r"^a task id's random part must be within 0\.\.2\*\*112 - 1$"
        ):
            queue_task_id(0, rand)
