"""GET /v1/jobs at scale: the listing's queries (page + capped count) on a tenant with
many jobs, with the filter indexes of migration 0008 and, as the baseline in the same
run, without them.

    python benchmarks/jobs_list.py [--jobs 200000] [--rounds 3] [--reps 7] [--out DIR]

Loads `--jobs` jobs for tenant `big` and as many for tenant `noise` (COPY, no audit),
gives 20% of big's jobs a last run, ANALYZEs, then for each round times every query
shape `--reps` times through kit.store.jobs_list.jobs_list (what the API calls) and
prints the median and the worst; then drops the three filter indexes and does the same.
Each round's figures are printed (not the best). A fresh database is made and dropped.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from psycopg.types.json import Jsonb
from sqlalchemy import Engine, create_engine, text

from kit.core.ids import run_id
from kit.core.schedule import parse_schedule
from kit.settings import load_settings
from kit.store import migrate
from kit.store.db import engine_for
from kit.store.jobs import JobSpec, jobs_create_batch
from kit.store.jobs_list import JobFilter, jobs_list
from kit.tasks import registry

TEAMS = [f"team{i:02d}" for i in range(20)]
FILTER_INDEXES = {
    "ix_jobs_list_priority": "CREATE INDEX ix_jobs_list_priority ON jobs (tenant, priority, name)",
    "ix_jobs_list_task_type": (
        "CREATE INDEX ix_jobs_list_task_type ON jobs (tenant, (task_spec ->> 'type'), name)"
    ),
    "ix_jobs_list_paused": ("CREATE INDEX ix_jobs_list_paused ON jobs (tenant, name) WHERE paused"),
}
QUERIES: dict[str, JobFilter] = {
    "all (first page)": JobFilter(),
    "name prefix (5%)": JobFilter(name_prefix="team07-"),
    "paused (1%)": JobFilter(paused=True),
    "priority critical (2%)": JobFilter(priority="critical"),
    "task type sleep (1%)": JobFilter(task_type="sleep", task_types=registry.names()),
    "prefix + priority high": JobFilter(name_prefix="team03-", priority="high"),
    "last run dead (0.4%)": JobFilter(last_status="dead"),
}


def pick(rng: random.Random, weighted: list[tuple[str, float]]) -> str:
    return rng.choices([v for v, _ in weighted], [w for _, w in weighted])[0]


def load(engine: Engine, tenant: str, n: int, rng: random.Random) -> list[str]:
    now = datetime.now(UTC)
    schedule = parse_schedule({"cron": "0 * * * *"}, now=now)
    tasks = {
        "http": {"type": "http", "url": "https://example.org/x", "method": "POST"},
        "noop": {"type": "noop"},
        "command": {"type": "command", "argv": ["true"]},
        "sleep": {"type": "sleep", "seconds": 1},
    }
    ids: list[str] = []
    batch: list[JobSpec] = []
    for i in range(n):
        kind = pick(rng, [("http", 60), ("noop", 30), ("command", 9), ("sleep", 1)])
        batch.append(
            JobSpec(
                name=f"{rng.choice(TEAMS)}-{kind}-{i:07d}",
                schedule=schedule,
                task=tasks[kind],
                retry={"max_attempts": 3},
                misfire={"kind": "run_once", "deadline_s": 60},
                priority=pick(rng, [("normal", 70), ("low", 20), ("high", 8), ("critical", 2)]),
                paused=rng.random() < 0.01,
            )
        )
        if len(batch) == 5000:
            ids += jobs_create_batch(engine, tenant, batch, now=now)
            batch = []
    if batch:
        ids += jobs_create_batch(engine, tenant, batch, now=now)
    return ids


def add_runs(engine: Engine, tenant: str, job_ids: list[str], rng: random.Random) -> int:
    """One past run for 20% of the jobs: 97.6% succeeded, 2% dead, the rest cancelled."""
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    raw = engine.raw_connection()
    try:
        with (
            raw.cursor() as cur,
            cur.copy(
                "COPY runs (run_id, job_id, tenant, job_version, scheduled_at, status,"
                " trigger_kind, errors) FROM STDIN"
            ) as copy,
        ):
            n = 0
            for job in job_ids:
                if rng.random() >= 0.2:
                    continue
                status = pick(rng, [("succeeded", 97.6), ("dead", 2), ("cancelled", 0.4)])
                copy.write_row((run_id(job, at), job, tenant, 1, at, status, "schedule", Jsonb([])))
                n += 1
        raw.commit()
    finally:
        raw.close()
    return n


def time_query(
    engine: Engine, f: JobFilter, reps: int, limit: int = 50
) -> tuple[float, float, int]:
    """(median ms, worst ms, count) of the page + count call."""
    times = []
    count = 0
    for _ in range(reps):
        t0 = time.perf_counter()
        page = jobs_list(engine, "big", f, None, limit)
        times.append((time.perf_counter() - t0) * 1000)
        count = page.count
    return statistics.median(times), max(times), count


def deep_page(engine: Engine, pages: int) -> float:
    """ms to follow the cursor `pages` pages deep (each page + its count)."""
    t0 = time.perf_counter()
    cursor = None
    for _ in range(pages):
        cursor = jobs_list(engine, "big", JobFilter(), cursor, 50).next_cursor
    return (time.perf_counter() - t0) * 1000 / pages


def measure(engine: Engine, reps: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for name, f in QUERIES.items():
        med, worst, count = time_query(engine, f, reps)
        out[name] = [round(med, 2), round(worst, 2), count]
    # a page of 1 fills after a few hundred jobs: what is left is the count's scan
    med, worst, count = time_query(engine, QUERIES["last run dead (0.4%)"], reps, limit=1)
    out["last run dead, page of 1 (~ the count)"] = [round(med, 2), round(worst, 2), count]
    out["deep pages (per page, 20 pages)"] = [round(deep_page(engine, 20), 2), 0.0, 0]
    return out


def plot(results: dict[str, list[dict[str, list[float]]]], path: Path) -> None:
    """Median ms per query shape, each round a dot, with and without the filter indexes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["with"][0])
    fig, ax = plt.subplots(figsize=(9, 4.8))
    for offset, (phase, colour) in enumerate((("with", "#2f9e57"), ("without", "#d92d20"))):
        for r, rnd in enumerate(results[phase]):
            ys = [i + (offset - 0.5) * 0.3 for i in range(len(names))]
            label = f"{phase} the filter indexes" if r == 0 else None
            ax.scatter([rnd[n][0] for n in names], ys, color=colour, s=18, label=label)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ms per call (page of 50 + count), median of the calls; one dot per round")
    ax.set_title("GET /v1/jobs on a tenant with 200,000 jobs (400,000 in the table)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    base = load_settings().database_url
    name = f"cf_bench_jobs_{uuid.uuid4().hex[:8]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = base.rsplit("/", 1)[0] + "/" + name
    try:
        migrate.upgrade(url)
        engine = engine_for(url, pool_size=2)
        rng = random.Random(1)
        t0 = time.perf_counter()
        big = load(engine, "big", args.jobs, rng)
        load(engine, "noise", args.jobs, rng)
        runs = add_runs(engine, "big", big, rng)
        vacuum = create_engine(url, isolation_level="AUTOCOMMIT")
        with vacuum.connect() as conn:  # visibility map set, statistics fresh
            conn.execute(text("VACUUM ANALYZE"))
        vacuum.dispose()
        took = time.perf_counter() - t0
        print(f"loaded {2 * args.jobs:,} jobs and {runs:,} runs in {took:.0f} s")
        results: dict[str, list[dict[str, list[float]]]] = {"with": [], "without": []}
        for rnd in range(1, args.rounds + 1):
            results["with"].append(measure(engine, args.reps))
            with engine.begin() as conn:
                for index in FILTER_INDEXES:
                    conn.execute(text(f"DROP INDEX {index}"))
                conn.execute(text("ANALYZE jobs"))
            results["without"].append(measure(engine, args.reps))
            with engine.begin() as conn:
                for ddl in FILTER_INDEXES.values():
                    conn.execute(text(ddl))
                conn.execute(text("ANALYZE jobs"))
            print(f"round {rnd} done")
        print()
        header = "| query (page of 50 + count) | matches | " + " | ".join(
            f"r{r} with / without (ms)" for r in range(1, args.rounds + 1)
        )
        print(header + " |")
        print("|" + " --- |" * (2 + args.rounds))
        for q in results["with"][0]:
            cells = [
                f"{results['with'][r][q][0]:.1f} / {results['without'][r][q][0]:.1f}"
                for r in range(args.rounds)
            ]
            print(f"| {q} | {results['with'][0][q][2]:,} | " + " | ".join(cells) + " |")
        print("\nmedian of", args.reps, "calls each; worst calls in the JSON output")
        print(f"command: python benchmarks/jobs_list.py --jobs {args.jobs} --rounds {args.rounds}")
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "jobs_list.json").write_text(json.dumps(results, indent=1))
            plot(results, args.out / "jobs_list.png")
        engine.dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
