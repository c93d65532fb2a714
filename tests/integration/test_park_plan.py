"""Parking paused jobs' triggers costs one primary-key probe a trigger, on statistics
taken before anything was parked (the case of the first minute after a mass pause)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

from kit.store.scheduling import _PARK_TRIGGERS, pg_tid_array, triggers_park

TRIGGERS = 8_000  # half parked first, then the other half: the scan's second batch


def _compared(plan: dict[str, Any]) -> int:
    """Rows every node of the plan read or compared and threw away, over its loops."""
    loops = plan.get("Actual Loops", 1)
    own = sum(
        plan.get(k, 0)
        for k in ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Join Filter")
    )
    return own * loops + sum(_compared(p) for p in plan.get("Plans", []))


def _due(engine: Engine, lo: int, hi: int) -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT ctid::text FROM triggers WHERE fire_at <> 'infinity'"
                " AND partition_id >= :lo AND partition_id < :hi"
            ),
            {"lo": lo, "hi": hi},
        )
        return [r[0] for r in rows]


def test_parking_a_second_batch_probes_each_trigger_once(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE triggers SET (autovacuum_enabled = false)"))
        conn.execute(
            text(
                "INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind)"
                " SELECT g % 1024, now() + (g % 60) * interval '1 second',"
                " gen_random_uuid(), 1, 'schedule' FROM generate_series(1, :n) g"
            ),
            {"n": TRIGGERS},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE triggers"))  # no 'infinity' row in the statistics
    first = _due(engine, 0, 512)
    with engine.begin() as conn:
        triggers_park(conn, first)
    second = _due(engine, 512, 1024)
    assert len(first) + len(second) == TRIGGERS
    with engine.begin() as conn:
        sql = "EXPLAIN (ANALYZE, FORMAT JSON) " + str(_PARK_TRIGGERS.text)
        plan = conn.execute(text(sql), {"ctids": pg_tid_array(second)}).scalar_one()
        root = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
        conn.rollback()
    # a probe per trigger reads its row and finds no parked one: a few rows each. Joined
    # against the materialised parked rows it compared every pair: 4,000 x 4,000.
    assert _compared(root) <= 4 * len(second), json.dumps(root)[:2000]
    with engine.begin() as conn:
        triggers_park(conn, second)
        parked = conn.execute(
            text("SELECT count(*) FROM triggers WHERE fire_at = 'infinity'")
        ).scalar_one()
    assert parked == TRIGGERS
