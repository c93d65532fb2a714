"""EXPLAIN (ANALYZE, BUFFERS) of the kit's batch claim and batch finish on a database of
run history (e.g. the one benchmarks/run_history.py builds, kept with --keep): custom plan,
generic plan, and with jit off, to show where the time of a statement goes as day
partitions accumulate (issue 12: the batch finish's JIT compile).

Run:  python benchmarks/run_history_plans.py cronfleet_bench_history [-v]
"""

from __future__ import annotations

import re
import sys

import psycopg
from sqlalchemy.engine import make_url

from kit.settings import load_settings
from kit.store import claims
from kit.store.run_history import batch_bounds


def pyformat(sql: str) -> str:
    """The kit's `:name` parameters as psycopg's `%(name)s` (casts `::` untouched)."""
    return re.sub(r"(?<!:):(\w+)", r"%(\1)s", sql)


def main(argv: list[str]) -> int:
    db, verbose = argv[0], "-v" in argv
    url = make_url(load_settings().database_url).set(database=db, drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False)) as conn:
        parts = conn.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'runs'::regclass"
        ).fetchone()[0]
        name = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'runs'::regclass AND c.relname <> 'runs_default'"
            " ORDER BY 1 LIMIT 1 OFFSET 2"
        ).fetchone()[0]
        # 64 finished runs of an old day: both statements find nothing to change
        ids = [
            r[0]
            for r in conn.execute(
                f"SELECT run_id::text FROM {name} ORDER BY run_id LIMIT 64 OFFSET 1000"
            ).fetchall()
        ]
        print(f"partitions of runs: {parts}; {len(ids)} runs of {name}")
        if len(ids) < 64:
            raise SystemExit(f"{name} has too few runs: run_history.py --keep with more days")
        arr = "{" + ",".join(ids) + "}"
        at = "2027-01-01T00:00:00Z"
        claim = {"run_ids": arr, "attempts": "{" + ",".join("1" * 64) + "}"}
        claim |= {"worker_id": "w", "ttl_ms": 30000, "now": at, **batch_bounds(ids)}
        claim |= {"min_ms": 30000, "max_ms": 30000}  # the sized lease's bounds (runs_claim)
        finish = {"run_ids": arr, "tokens": "{" + ",".join("x" * 64) + "}"}
        finish |= {"started": "{" + ",".join(["NULL"] * 64) + "}", "now": at, **batch_bounds(ids)}
        for label, sql, params in (
            ("runs_claim", claims._CLAIM, claim),
            ("runs_finish_ok", claims._FINISH_OK_BATCH, finish),
        ):
            for mode in ("force_custom_plan", "force_generic_plan", "jit_off"):
                conn.execute("SET jit = " + ("off" if mode == "jit_off" else "on"))
                if mode != "jit_off":
                    conn.execute(f"SET plan_cache_mode = {mode}")
                rows = conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, SUMMARY) " + pyformat(sql), params, prepare=True
                ).fetchall()
                conn.rollback()
                lines = [r[0] for r in rows]
                if not verbose:
                    jit = ("Functions", "Options", "Timing")
                    lines = [x for x in lines if x[0] != " " or x.strip().startswith(jit)]
                print(f"=== {label}, {mode}\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
