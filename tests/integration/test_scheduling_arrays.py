"""The array literals and COPY text the scan sends (kit.store.scheduling: pg_array,
pg_text_array, pg_tid_array, pg_bools, copy_timestamp) are read back by PostgreSQL as
exactly the values they were made from: any text (quotes, backslashes, commas, braces,
NULL, the word NULL), ids, row addresses, booleans, instants to the millisecond."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from kit.core.timeutil import from_epoch_ms
from kit.store.scheduling import copy_timestamp, pg_array, pg_bools, pg_text_array, pg_tid_array

pytestmark = pytest.mark.integration

texts = st.lists(
    st.one_of(
        st.none(),
        st.just("NULL"),
        st.sampled_from(["", " ", '"', "\\", ",", "{}", "a b", "tenant-0001"]),
        st.text(st.characters(exclude_characters="\x00"), max_size=12),
    ),
    max_size=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts, texts)
def test_a_text_array_reads_back_as_its_values(engine: Engine, values, again) -> None:
    with engine.connect() as conn:
        for v in (values, again):  # the second time through the cache of quoted values
            got = conn.execute(text("SELECT CAST(:a AS text[])"), {"a": pg_text_array(v)})
            assert got.scalar_one() == v


def test_ids_addresses_and_booleans_read_back(engine: Engine) -> None:
    with engine.connect() as conn:

        def read(sql: str, literal: str) -> object:
            return conn.execute(text(sql), {"a": literal}).scalar_one()

        assert read("SELECT CAST(:a AS bigint[])", pg_array([0, -1, 2**62])) == [0, -1, 2**62]
        tids = ["(0,1)", "(12,345)"]
        assert read("SELECT CAST(CAST(:a AS tid[]) AS text[])", pg_tid_array(tids)) == tids
        assert read("SELECT CAST(:a AS tid[])", pg_tid_array([])) == []
        assert read("SELECT CAST(:a AS boolean[])", pg_bools([True, False])) == [True, False]


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.integers(0, 2**42), min_size=1, max_size=20))
def test_a_copied_instant_reads_back_to_the_millisecond(engine: Engine, ms_values) -> None:
    with engine.connect() as conn:
        conn.execute(text("SET TIME ZONE 'Pacific/Chatham'"))  # the text carries its offset
        for ms in ms_values:
            got = conn.execute(text("SELECT CAST(:t AS timestamptz)"), {"t": copy_timestamp(ms)})
            assert got.scalar_one() == from_epoch_ms(ms)
