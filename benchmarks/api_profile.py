"""Where the API's CPU goes under the queue mix (issue 16): one `cronfleet api` process of
this code, the queue suite one call per task at 1,000 tasks/s offered, and py-spy sampling
the thread holding the GIL (so the samples are the process's Python CPU) for the load.

    python benchmarks/api_profile.py --out benchmarks/results/api_speed/api_profile_queue.md

Prints (and writes) the share of samples per layer (inclusive: a sample counts for every
layer on its stack) and the leaf functions with the most samples (self time).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # loadtest.common
import api_speed

LAYERS = {
    "HTTP server (uvicorn, httptools, uvloop)": ("uvicorn/", "httptools", "uvloop"),
    "framework (starlette, fastapi routing and dependencies)": ("starlette/", "fastapi/"),
    "validation and JSON (pydantic, json)": ("pydantic", "json/", "orjson"),
    "thread hop (anyio worker threads, futures)": ("anyio/", "concurrent/futures", "threading.py"),
    "greenlet bridge (sqlalchemy.util concurrency, greenlet)": ("concurrency.py", "greenlet"),
    "SQL building and results (sqlalchemy)": ("sqlalchemy/",),
    "driver (psycopg, socket waits)": ("psycopg/", "psycopg_pool"),
    "kit code (kit/)": ("(kit/", "/kit/"),
}


OTHER = "other (standard library: asyncio, selectors, ...)"


def _layer_of(frame: str) -> str:
    """The layer whose code a leaf frame is (the first that matches, in LAYERS' order)."""
    for layer, marks in LAYERS.items():
        if any(m in frame for m in marks):
            return layer
    return OTHER


def summarize(raw: Path) -> str:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaves[frames[-1]] += n
        for layer, marks in LAYERS.items():
            if any(m in f for f in frames for m in marks):
                inclusive[layer] += n
        own[_layer_of(frames[-1])] += n
    lines = [f"{total:,} samples of the thread holding the GIL (py-spy --gil, 200 Hz)", ""]
    lines += [
        "| layer | inclusive (on the stack) | self (the sampled frame is its code) |",
        "| --- | ---: | ---: |",
    ]
    for layer in [*LAYERS, OTHER]:
        share = inclusive[layer] / max(1, total) if layer in LAYERS else float("nan")
        lines.append(f"| {layer} | {share:.0%} | {own[layer] / max(1, total):.0%} |")
    lines += ["", "| leaf function (self) | share |", "| --- | ---: |"]
    for frame, n in leaves.most_common(15):
        lines.append(f"| `{frame}` | {n / max(1, total):.1%} |")
    return "\n".join(lines)


def commit_latency(commits: int = 300) -> str:
    """One-row update transactions, one after the other: what a commit waits for (the WAL
    flush) with synchronous_commit on, and with it off for the same session."""
    import statistics
    import time

    import sqlalchemy as sa

    from kit.settings import load_settings

    engine = sa.create_engine(load_settings().database_url)
    lines = [
        "",
        "| one-row update + commit, sequential | p50 ms | p99 ms |",
        "| --- | ---: | ---: |",
    ]
    try:
        with engine.connect() as conn:
            conn.execute(
                sa.text("CREATE TABLE IF NOT EXISTS cf_commit_probe (id int primary key, n int)")
            )
            conn.execute(
                sa.text("INSERT INTO cf_commit_probe VALUES (1, 0) ON CONFLICT DO NOTHING")
            )
            conn.commit()
            for mode in ("on", "off"):
                conn.execute(sa.text(f"SET synchronous_commit = {mode}"))
                conn.commit()
                times = []
                for _ in range(commits):
                    t = time.perf_counter()
                    conn.execute(sa.text("UPDATE cf_commit_probe SET n = n + 1 WHERE id = 1"))
                    conn.commit()
                    times.append(1000 * (time.perf_counter() - t))
                times.sort()
                p99 = times[int(0.99 * (len(times) - 1))]
                lines.append(
                    f"| synchronous_commit = {mode} | {statistics.median(times):.2f} | {p99:.2f} |"
                )
            conn.execute(sa.text("DROP TABLE cf_commit_probe"))
            conn.commit()
    finally:
        engine.dispose()
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--out", default="")
    parser.add_argument("--mix", default="queue, one call per task", choices=list(api_speed.MIXES))
    parser.add_argument("--raw", default="", help="keep py-spy's raw stacks in this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cf-api-profile-") as tmp:
        port = api_speed.free_port()
        proc = api_speed.serve(None, 1, port, Path(tmp) / "api.log")
        raw = Path(tmp) / "profile.txt"
        try:
            from loadtest.common import listening_pids

            pid = min(listening_pids(port))
            spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--gil",
                    "--format",
                    "raw",
                    "-r",
                    "200",
                    "-d",
                    str(args.duration + 3),
                    "-p",
                    str(pid),
                    "-o",
                    str(raw),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            load = threading.Thread(
                target=api_speed.run_mix,
                args=(args.mix, port, args.duration, Path(tmp) / "q"),
            )
            load.start()
            spy.wait()
            load.join()
        finally:
            api_speed.stop(proc)
        if args.raw:
            shutil.copyfile(raw, args.raw)
        text = summarize(raw) + "\n" + commit_latency()
    print(text)
    if args.out:
        Path(args.out).write_text(
            f"# Where the API's CPU goes ({args.mix}, 1 process)\n\n"
            f"    python benchmarks/api_profile.py --mix '{args.mix}' --out {args.out}\n\n"
            + text
            + "\n"
        )


if __name__ == "__main__":
    main()
