"""Decisions the store takes by the database's clock, checked exactly at their edge with
an explicit instant (`now`, bound as `coalesce(:now, now())`): the test sets the time,
nothing waits for it. One millisecond before the edge and at it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import Engine, text

from kit.store.claims import job_dead_streak_in, run_finish_cancelled
from kit.store.console_sessions import session_open, session_resolve
from kit.store.dead_letters import (
    dead_letter_get,
    dead_letter_in,
    dead_letter_replay,
    dead_letters_replay_bulk,
)
from kit.store.fleet import fleet_read
from kit.store.fleet_health import fleet_health_read
from kit.store.jobs_list import jobs_list
from kit.store.run_cancel import run_cancel
from kit.store.scheduling import node_heartbeat, nodes_live
from kit.store.tokens import token_create
from kit.store.worker_link import presence_upsert, psycopg_url
from tests.integration.worker_rows import make_job, make_run, run_row

pytestmark = pytest.mark.integration

T = datetime(2031, 3, 4, 5, 6, 7, 123_000, tzinfo=UTC)  # an instant the real clock is not at
MS = timedelta(milliseconds=1)
TTL_MS = 4_000
TTL = timedelta(milliseconds=TTL_MS)


def _lease(engine: Engine, partition: int, owner: str, expires_at: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO partition_leases (partition_id, owner, epoch, expires_at) "
                "VALUES (:p, :o, 1, :at)"
            ),
            {"p": partition, "o": owner, "at": expires_at},
        )


def test_a_node_is_live_until_its_heartbeat_is_a_ttl_old(engine: Engine) -> None:
    with engine.begin() as conn:
        node_heartbeat(conn, "early", now=T - MS)
        node_heartbeat(conn, "n1", now=T - TTL)  # first heartbeat: the row is made
        node_heartbeat(conn, "n1", now=T)  # the upsert moves it on
    with engine.begin() as conn:
        assert nodes_live(conn, TTL_MS, now=T + TTL - 2 * MS) == ["early", "n1"]
        assert nodes_live(conn, TTL_MS, now=T + TTL - MS) == ["n1"]  # early's ttl is up
        assert nodes_live(conn, TTL_MS, now=T + TTL) == []
        row = conn.execute(text("SELECT * FROM scheduler_nodes WHERE node_id = 'n1'")).one()
    assert (row.heartbeat_at, row.started_at) == (T, T - TTL)
    live = {n.node_id: n.live for n in fleet_read(engine, 8, TTL_MS, now=T + TTL - MS).nodes}
    assert live == {"early": False, "n1": True}
    assert not any(n.live for n in fleet_read(engine, 8, TTL_MS, now=T + TTL).nodes)


def test_a_partition_is_owned_until_its_lease_expires(engine: Engine) -> None:
    with engine.begin() as conn:
        node_heartbeat(conn, "n1", now=T)
    _lease(engine, 0, "n1", T)
    _lease(engine, 1, "n1", T + TTL)
    before = fleet_read(engine, 8, TTL_MS, now=T - MS)
    at = fleet_read(engine, 8, TTL_MS, now=T)
    assert before.now == T - MS and at.now == T
    assert (before.partitions_unowned, before.nodes[0].partitions) == (6, 2)
    assert (at.partitions_unowned, at.nodes[0].partitions) == (7, 1)
    assert fleet_health_read(engine, 8, now=T - MS).partitions_unowned == 6
    assert fleet_health_read(engine, 8, now=T).partitions_unowned == 7
    assert fleet_health_read(engine, 8, now=T + TTL).partitions_unowned == 8


def test_a_worker_is_live_while_its_presence_is_fresh_or_it_holds_a_lease(
    engine: Engine,
) -> None:
    with psycopg.connect(psycopg_url(engine), autocommit=True) as conn:
        presence_upsert(conn, "w-present", 4, 1, now=T)
    job = make_job(engine)
    make_run(
        engine, job, status="running", worker_id="w-leased", lease_token="x", lease_expires_at=T
    )

    def live(now: datetime) -> dict[str, tuple[bool, int]]:
        view = fleet_read(engine, 8, TTL_MS, worker_ttl_s=15, now=now)
        return {w.worker_id: (w.live, w.in_flight) for w in view.workers}

    assert live(T - MS) == {"w-leased": (True, 1), "w-present": (True, 0)}
    assert live(T) == {"w-present": (True, 0)}  # the lease ended: nothing shows the worker
    assert live(T + timedelta(seconds=15) - MS) == {"w-present": (True, 0)}
    assert live(T + timedelta(seconds=15)) == {"w-present": (False, 0)}


def test_a_console_session_ends_at_its_expiry(engine: Engine) -> None:
    token = token_create(engine, "acme", ["read"]).token
    opened = session_open(engine, token, 60, now=T)
    assert opened is not None
    secret, session = opened
    with engine.connect() as conn:
        expires_at = conn.execute(text("SELECT expires_at FROM console_sessions")).scalar_one()
    assert expires_at == T + timedelta(seconds=60)
    kept = session_resolve(engine, secret, now=expires_at - MS)
    assert kept is not None and kept.csrf_token == session.csrf_token
    assert session_resolve(engine, secret, now=expires_at) is None


def test_a_dead_letter_is_dated_by_the_transaction_that_made_it(engine: Engine) -> None:
    job = make_job(engine, pause_after_dead=1)
    rid = make_run(engine, job, status="dead")
    with engine.begin() as conn:
        dead_letter_in(conn, rid, now=T)
        assert job_dead_streak_in(conn, job, now=T) is True
        updated = conn.execute(
            text("SELECT updated_at FROM jobs WHERE job_id = :j"), {"j": job}
        ).scalar_one()
    assert updated == T  # the pause is dated with the death
    assert dead_letter_get(engine, "acme", rid).created_at == T
    # the bulk replay's range [from, to) meets the written instant exactly
    assert dead_letters_replay_bulk(engine, "acme", dead_to=T) == 0
    assert dead_letters_replay_bulk(engine, "acme", dead_from=T + MS) == 0
    assert dead_letters_replay_bulk(engine, "acme", dead_from=T, dead_to=T + MS, now=T + TTL) == 1
    assert dead_letter_get(engine, "acme", rid).replayed_at == T + TTL
    # it dies again later: the dead letter is re-dated, and a single replay dates its own
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET status = 'dead' WHERE run_id = :r"), {"r": rid})
        dead_letter_in(conn, rid, now=T + 2 * TTL)
    assert dead_letter_get(engine, "acme", rid).created_at == T + 2 * TTL
    assert dead_letter_replay(engine, "acme", rid, now=T + 3 * TTL).replayed_at == T + 3 * TTL


def test_cancelled_runs_are_finished_at_the_instant_given(engine: Engine) -> None:
    job = make_job(engine)
    by_api = make_run(engine, job, scheduled_at=T - TTL)
    assert run_cancel(engine, "acme", by_api, "tok1", now=T).run.finished_at == T
    with engine.connect() as conn:
        audited = conn.execute(
            text("SELECT at FROM job_audit WHERE action = 'cancel_run'")
        ).scalar_one()
    assert audited == T
    by_worker = make_run(engine, job, scheduled_at=T, status="running", lease_token="tk")
    assert run_finish_cancelled(engine, by_worker, "tk", "job deleted", now=T + MS).accepted
    assert run_row(engine, by_worker).finished_at == T + MS


def test_the_last_run_of_a_job_is_the_newest_scheduled_by_now(engine: Engine) -> None:
    job = make_job(engine)
    earlier = make_run(engine, job, scheduled_at=T - TTL, status="succeeded")
    due = make_run(engine, job, scheduled_at=T)

    def last(now: datetime) -> str | None:
        ((_, run),) = jobs_list(engine, "acme", now=now).jobs
        return run.run_id if run is not None else None

    assert last(T - TTL - MS) is None
    assert last(T - MS) == earlier
    assert last(T) == due
