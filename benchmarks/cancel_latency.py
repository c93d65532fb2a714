"""How fast POST /v1/runs/{id}:cancel stops a running task: from the cancel's call to
(a) the worker being told and (b) the task's process being gone, through the cancel
notification (LISTEN/NOTIFY), and, as the baseline in the same run, through the
heartbeat's lease check alone (what stopped a cancelled task before).

    python benchmarks/cancel_latency.py [--runs 10] [--series 3] [--baseline-runs 3]

A real worker (in this process) on the local stack runs `sleep 300` commands; each is
cancelled through kit.store.run_cancel.run_cancel (what the API route calls) once its
process is up. Every value of every series is printed. Default run lease TTL (30 s,
heartbeat every 10 s).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from one_worker import scratch, wait
from sqlalchemy import text

from kit.core.ids import run_id
from kit.core.schedule import parse_schedule
from kit.core.task_policy import TaskPolicy
from kit.core.timeutil import to_epoch_ms
from kit.stack.process import running
from kit.store.jobs import JobCreate, JobSpec, job_create
from kit.store.run_cancel import run_cancel
from kit.tasks.policy import PolicySource, local_policy_toml
from kit.transport import RunMessage
from kit.worker.worker import Worker, task_executor

# The bench tenant may run /bin/sh (as nobody where this runs as root).
POLICY = PolicySource.fixed(
    TaskPolicy.parse(tomllib.loads(local_policy_toml("bench", ["/bin/sh"])))
)

_SEQ = itertools.count()  # run ids are per millisecond: one apart each


def series(
    engine, publisher, worker: Worker, job: str, pid_dir: Path, n: int, told: dict[str, float]
) -> list[tuple[float, float]]:  # type: ignore[no-untyped-def]
    """n cancels; (ms to the worker being told, ms to the process gone) for each."""
    out = []
    for _ in range(n):
        at = datetime.now(UTC).replace(microsecond=0) + timedelta(milliseconds=next(_SEQ))
        rid = run_id(job, at)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at, status,"
                    " trigger_kind) VALUES (:r, :j, 'bench', 1, :at, 'pending', 'manual')"
                ),
                {"r": rid, "j": job, "at": at},
            )
        publisher.publish([RunMessage(rid, job, 1, to_epoch_ms(at), "normal")])
        pid_file = pid_dir / rid
        wait(lambda f=pid_file: f.exists() and f.read_text().strip() != "")
        pid = int(pid_file.read_text())
        t0 = time.monotonic()
        run_cancel(engine, "bench", rid, "bench-token")
        wait(lambda p=pid: not running(p), timeout_s=60)
        gone = time.monotonic()
        wait(lambda: worker.in_flight() == 0, timeout_s=60)
        told_at = told.get(rid, gone)
        out.append(((told_at - t0) * 1000, (gone - t0) * 1000))
    return out


def summary(label: str, values: Iterable[float]) -> str:
    v = sorted(values)
    return (
        f"{label}: "
        + ", ".join(f"{x:.0f}" for x in v)
        + f"  (p50 {statistics.median(v):.0f} ms, max {v[-1]:.0f} ms)"
    )


def plot(series_ms: list[list[tuple[float, float]]], baseline_ms: list[float], path: Path) -> None:
    """Every cancel as a dot: ms from the cancel call to the process gone, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    for i, got in enumerate(series_ms):
        ax.scatter([b for _, b in got], [i] * len(got), color="#2f9e57", s=16)
        ax.scatter([a for a, _ in got], [i + 0.2] * len(got), color="#2d6fd6", s=10)
    ax.scatter(baseline_ms, [len(series_ms)] * len(baseline_ms), color="#d92d20", s=16)
    labels = [f"series {i + 1}: notification" for i in range(len(series_ms))]
    ax.set_yticks(range(len(series_ms) + 1), [*labels, "baseline: heartbeat only"])
    ax.set_xscale("log")
    ax.set_xlabel("ms from the cancel call (blue: worker told, green/red: process gone)")
    ax.set_title("Cancelling a running command task")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="cancels per series")
    parser.add_argument("--series", type=int, default=3)
    parser.add_argument("--baseline-runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write cancel_latency.json/.png")
    args = parser.parse_args()
    with scratch("cancel") as s:
        engine, publisher, consumer = s.engine, s.publisher, s.consumer
        pid_dir = Path(tempfile.mkdtemp(prefix="cf-cancel-"))
        pid_dir.chmod(0o777)  # the tasks' run-as user writes its pid here
        script = f'echo $$ > "{pid_dir}/$CRONFLEET_RUN_ID"; exec sleep 300'
        spec = JobSpec(
            "sleeper",
            parse_schedule({"every_s": 86_400}, now=datetime.now(UTC)),
            {"type": "command", "argv": ["/bin/sh", "-c", script]},
            {"max_attempts": 1},
            {"kind": "run_once", "deadline_s": 60},
            timeout_s=3600,
        )
        job = job_create(engine, JobCreate("bench", spec)).job.job_id
        worker = Worker(
            engine, consumer, publisher, "bench-worker", 4, s.settings.run_lease_ttl_ms,
            execute=task_executor(POLICY),
        )  # fmt: skip
        told: dict[str, float] = {}
        hear = worker.stop_cancelled

        def timed(run_ids: Iterable[str]) -> set[str]:
            ids = list(run_ids)
            for r in ids:
                told.setdefault(r, time.monotonic())
            return hear(ids)

        worker.link.on_cancel = timed
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop, 5.0), daemon=True)
        thread.start()
        wait(worker.link.listening.is_set)
        results = []
        for s in range(1, args.series + 1):
            got = series(engine, publisher, worker, job, pid_dir, args.runs, told)
            results.append(got)
            print(f"series {s} (notification), {args.runs} cancels, ms from the cancel call:")
            print("  " + summary("worker told", [a for a, _ in got]))
            print("  " + summary("process gone", [b for _, b in got]))
        # Baseline: the notification is ignored; the heartbeat finds the lease gone.
        worker.link.on_cancel = lambda run_ids: set()
        heartbeat_s = worker.heartbeat_s
        got = series(engine, publisher, worker, job, pid_dir, args.baseline_runs, {})
        print(f"baseline (heartbeat every {heartbeat_s:.0f} s, notification ignored):")
        print("  " + summary("process gone", [b for _, b in got]))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            data = {"series": results, "baseline_ms": [b for _, b in got]}
            (args.out / "cancel_latency.json").write_text(json.dumps(data, indent=1))
            plot(results, [b for _, b in got], args.out / "cancel_latency.png")
        print(
            f"command: python benchmarks/cancel_latency.py --runs {args.runs}"
            f" --series {args.series} --baseline-runs {args.baseline_runs}"
        )
        stop.set()
        thread.join(timeout=30)


if __name__ == "__main__":
    main()
