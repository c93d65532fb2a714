"""Real work at speed (issue 14): http and command tasks through the real services, timed
where the work lands. Not a test: it prints figures and the command.

    python benchmarks/http_tasks.py burst --jobs 5000            # 5,000 http tasks due at T
    python benchmarks/http_tasks.py sustain --rate 1000 --seconds 180
    python benchmarks/http_tasks.py burst --jobs 20000 --max-wait-s 600   # overload
    python benchmarks/http_tasks.py burst --task command --jobs 2000
    python benchmarks/http_tasks.py burst --jobs 5000 --series 3 --baseline-ref 4640567
    python benchmarks/http_tasks.py burst --jobs 20000 --delay-ms 1000 --quiet-jobs 200 \
        --compare-fair-share --series 3 --max-wait-s 400        # a noisy neighbour

The target is the Go ledger (loadtest/ledger, built by scripts/build_ledger.sh) on
loopback: it records each request's Idempotency-Key and the instant it arrived, so the lag
is measured at the target (arrival - scheduled second), and a key that arrives twice is a
run whose work was done twice. A `command` task is `/bin/bash -c` that appends its key and
`$EPOCHREALTIME` to a file: the same ledger, written by the task's process.

Each run has its own scratch database and topics and a fleet of `python -m kit.cli`
processes (one scheduler node, --workers workers, a reaper; benchmarks/life_of_a_run.py's
`phase`), loopback allowed for http tasks. --series N runs N rounds, each the baseline
(the kit at --baseline-ref, extracted with `git archive`, run by the same script) and then
this checkout, every run printed and kept in --out.

--quiet-jobs N adds a second tenant (`quiet`) with N http tasks due at the same second on
a second ledger that answers at once (a target of its own): the noisy neighbour of
docs/tenants.md. --compare-fair-share runs each round twice, the workers with
`--no-fair-share` first, then with fair shares (this checkout both times).

Figures per run: arrival lag p50/p99/max (first arrival of each run), runs whose key
never arrived (dropped), keys that arrived twice, runs at attempt 2 or more, the kit's
CPU by process (services, PostgreSQL backends, broker) and per task, and for `sustain`
the worst second's p99.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from life_of_a_run import (
    CHUNK,
    CpuWindow,
    Phase,
    Profiler,
    check_alive,
    cpu_dict,
    db_now,
    load_line,
    pct,
    phase,
    profile_targets,
    say,
    scalar,
    spec,
)

from kit.core.schedule import IntervalSchedule, OneOffSchedule
from kit.store.jobs import jobs_create_batch

REPO = Path(__file__).resolve().parents[1]
LEDGER_BIN = REPO / "loadtest" / "ledger" / "bin" / "ledger"
DONE = ("succeeded", "dead", "skipped", "cancelled")


class Ledger:
    """The Go ledger on loopback, or a file the command tasks append to."""

    def __init__(self, out_dir: Path, task: str) -> None:
        self.task = task
        self.path = out_dir / f"ledger-{uuid.uuid4().hex[:8]}.tsv"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        if task == "http":
            if not LEDGER_BIN.exists():
                raise SystemExit(f"{LEDGER_BIN} missing: run bash scripts/build_ledger.sh")
            port_file = out_dir / f"ledger-{os.getpid()}.port"
            port_file.unlink(missing_ok=True)
            self.proc = subprocess.Popen(
                [
                    str(LEDGER_BIN),
                    "-addr",
                    "127.0.0.1:0",
                    "-out",
                    str(self.path),
                    "-port-file",
                    str(port_file),
                ]
            )
            deadline = time.monotonic() + 10
            while not port_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.port = int(port_file.read_text())
        else:
            self.path.touch()
            self.path.chmod(0o666)  # the command tasks' run-as user appends to it

    def task_spec(self, delay_ms: int) -> dict[str, Any]:
        if self.task == "http":
            query = f"?delay_ms={delay_ms}" if delay_ms else ""
            return {
                "type": "http",
                "method": "POST",
                "url": f"http://127.0.0.1:{self.port}/hook{query}",
                "headers": {"Content-Type": "application/json"},
                "body": "{}",
            }
        line = f'printf "%s\\t%s\\n" "$CRONFLEET_IDEMPOTENCY_KEY" "$EPOCHREALTIME" >> {self.path}'
        if delay_ms:
            line += f"; sleep {delay_ms / 1000:g}"
        return {"type": "command", "argv": ["/bin/bash", "-c", line]}

    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def arrivals(self) -> list[tuple[str, float]]:
        """(key, arrival as Unix seconds) for every request or task start recorded."""
        time.sleep(0.3)  # the Go ledger flushes every 100 ms
        out = []
        for line in self.path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) < 2 or not parts[0]:
                continue
            t = float(parts[1])
            out.append((parts[0], t / 1e6 if self.task == "http" else t))
        return out

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def cpu_of_pid(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


def worker_threads(p: Phase) -> dict[int, dict[int, str]]:
    """Each worker's threads by OS id and Python name (py-spy names them; the fleet is
    warm, so the task loop and the worker's own threads exist)."""
    from burst_at_t import thread_names

    pids = [c.proc.pid for c in p.fleet.children if c.service.name.startswith("worker")]
    return {pid: thread_names(pid) for pid in pids}


def thread_cpu_s(threads: dict[int, dict[int, str]]) -> dict[str, float]:
    """CPU seconds so far of the named threads, summed by name over the workers
    (/proc schedstat: nanoseconds on a core)."""
    out: dict[str, float] = {}
    for pid, names in threads.items():
        for tid, name in names.items():
            try:
                on = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            out[name] = out.get(name, 0.0) + on / 1e9
    return out


def wait_done(p: Phase, ledger: Ledger, expected: int, until_s: float) -> tuple[int, list]:
    """Until every run of the bench (and quiet) tenant is done (or the bound): progress
    per 0.5 s."""
    progress: list[tuple[float, int, int]] = []
    deadline = time.monotonic() + until_s
    left = expected
    while time.monotonic() < deadline:
        check_alive(p)
        left = scalar(
            p.engine,
            "SELECT count(*) FROM runs WHERE tenant IN ('bench', 'quiet') AND status <> ALL(:done)",
            done=list(DONE),
        )
        done = scalar(
            p.engine,
            "SELECT count(*) FROM runs WHERE tenant IN ('bench', 'quiet') AND status = ANY(:done)",
            done=list(DONE),
        )
        progress.append((time.time(), done, left))
        if left == 0 and done >= expected:
            break
        time.sleep(0.5)
    return left, progress


def audit(
    p: Phase, ledger: Ledger, before: datetime | None = None, tenant: str = "bench"
) -> dict[str, Any]:
    """Runs (scheduled before `before`, if given: a sustained run's last seconds were
    scanned ahead before its triggers went) against arrivals: lag of each run's first
    arrival, dropped, twice, attempts, and why the first few runs took a second attempt."""
    with p.engine.connect() as conn:
        runs = conn.execute(
            text(
                "SELECT run_id::text, extract(epoch FROM scheduled_at), attempt, status, "
                "errors FROM runs WHERE tenant = :tenant "
                "AND scheduled_at < coalesce(CAST(:before AS timestamptz), 'infinity')"
            ),
            {"before": before, "tenant": tenant},
        ).all()
    arrivals = ledger.arrivals()
    seen = Counter(k for k, _ in arrivals)
    first: dict[str, float] = {}
    for key, at in arrivals:
        if key not in first or at < first[key]:
            first[key] = at
    scheduled = {r[0]: float(r[1]) for r in runs}
    lags = [first[k] - s for k, s in scheduled.items() if k in first]
    statuses = Counter(r[3] for r in runs)
    return {
        "runs": len(runs),
        "statuses": dict(statuses),
        "arrived": len(lags),
        "requests": len(arrivals),
        "dropped": sum(1 for k in scheduled if k not in first),
        "arrived_twice": sum(1 for k in scheduled if seen[k] > 1),
        "unexpected_keys": sum(1 for k in seen if k not in scheduled),
        "attempt_2_or_more": sum(1 for r in runs if r[2] > 1),
        "why_attempt_2": [str(r[4])[:300] for r in runs if r[2] > 1][:5],
        "why_twice": [f"{r[0]} {r[3]} {str(r[4])[:300]}" for r in runs if seen[r[0]] > 1][:5],
        "lag_s": [pct(lags, 0.5), pct(lags, 0.99), max(lags, default=float("nan"))],
        "lags": lags,
        "arrivals": sorted(first[k] - scheduled[k] for k in scheduled if k in first),
        "by_second": _by_second(first, scheduled),
    }


def _by_second(first: dict[str, float], scheduled: dict[str, float]) -> list[list[float]]:
    """[arrival second since the first scheduled second, arrivals, p50, p99 lag]."""
    if not first:
        return []
    t0 = min(scheduled.values())
    buckets: dict[int, list[float]] = {}
    for key, at in first.items():
        if key in scheduled:
            buckets.setdefault(int(at - t0), []).append(at - scheduled[key])
    return [[s, len(v), pct(v, 0.5), pct(v, 0.99)] for s, v in sorted(buckets.items())]


def one_run(args: argparse.Namespace, code: str, label: str, out_dir: Path) -> dict[str, Any]:
    name = f"{args.mode}-{args.task}-{label}"
    run_dir = out_dir / name
    run_dir.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(run_dir, args.task)
    quiet_ledger = Ledger(run_dir, args.task) if args.quiet_jobs else None
    env = {"CRONFLEET_HTTP_ALLOW_HOSTS": "127.0.0.1"}
    # the fleet's `python -m kit.cli` puts its working directory ahead of PYTHONPATH: it
    # runs from the tree it is to run, and says which kit it imported
    tree = code or str(REPO)
    env["PYTHONPATH"] = tree
    if args.trace_starts:  # each worker records where its runs' start lag goes
        env["PYTHONPATH"] += os.pathsep + str(REPO / "benchmarks" / "start_trace")
        env["STARTTRACE_DIR"] = str(args.trace_starts.resolve() / name)
    imported = subprocess.run(
        [sys.executable, "-c", "import kit; print(kit.__file__)"],
        cwd=tree,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    say(f"[{name}] the fleet imports {imported}")
    args.jobs = args.jobs if args.mode == "burst" else args.rate
    here = os.getcwd()
    os.chdir(tree)
    try:
        with phase(name, args, 1, run_dir, env_extra=env, commands=("/bin/bash",)) as p:
            task = ledger.task_spec(args.delay_ms)
            now = db_now(p.engine)
            if args.mode == "burst":
                at = (now + timedelta(seconds=args.lead_s)).replace(microsecond=0)
                schedule: Any = OneOffSchedule(at)
                expected = args.jobs
                count = args.jobs
            else:
                at = (now + timedelta(seconds=12)).replace(microsecond=0)
                schedule = IntervalSchedule(1, at)
                expected = args.rate * args.seconds
                count = args.rate
            for i in range(0, count, CHUNK):
                chunk = [
                    replace(spec(f"h{j}", schedule, task), timeout_s=args.timeout_s)
                    for j in range(i, min(count, i + CHUNK))
                ]
                jobs_create_batch(p.engine, "bench", chunk, now=now)
            if quiet_ledger is not None:  # the other tenant, at the same second
                quiet_task = quiet_ledger.task_spec(0)
                for i in range(0, args.quiet_jobs, CHUNK):
                    chunk = [
                        replace(spec(f"q{j}", schedule, quiet_task), timeout_s=args.timeout_s)
                        for j in range(i, min(args.quiet_jobs, i + CHUNK))
                    ]
                    jobs_create_batch(p.engine, "quiet", chunk, now=now)
                expected += args.quiet_jobs if args.mode == "burst" else 0
            say(f"[{name}] {count} {args.task} jobs, first due {at}")
            while db_now(p.engine) < at - timedelta(seconds=11):
                time.sleep(0.2)
            cpu = CpuWindow()
            threads = worker_threads(p)
            threads0 = thread_cpu_s(threads)
            cpu.start(p.fleet, p.engine, p.database)
            target0 = cpu_of_pid(ledger.pid())
            profiler = (
                Profiler(run_dir, profile_targets(p), rate=250, gil=True) if args.profile else None
            )
            if args.mode == "sustain":
                end = at + timedelta(seconds=args.seconds)
                while db_now(p.engine) < end:
                    check_alive(p)
                    time.sleep(1.0)
                with p.engine.begin() as conn:  # no trigger fires again
                    conn.execute(text("DELETE FROM triggers"))
            left, progress = wait_done(p, ledger, expected, args.max_wait_s)
            profile = profiler.stop() if profiler else {}
            cpu.stop(p.fleet, p.engine, p.database)
            target_cpu = cpu_of_pid(ledger.pid()) - target0
            threads1 = thread_cpu_s(threads)
            by_thread = {k: round(v - threads0.get(k, 0.0), 4) for k, v in threads1.items()}
            result = audit(p, ledger, end if args.mode == "sustain" else None)
            if quiet_ledger is not None:
                quiet = audit(p, quiet_ledger, None, "quiet")
                result["quiet"] = {k: v for k, v in quiet.items() if k not in BULKY}
    finally:
        os.chdir(here)
        ledger.close()
        if quiet_ledger is not None:
            quiet_ledger.close()
    done = sum(v for k, v in result["statuses"].items() if k in DONE)
    workers = sum(v for k, v in cpu.by_service.items() if k.startswith("worker"))
    result.update(
        {
            "phase": name,
            "code": label,
            "mode": args.mode,
            "task": args.task,
            "expected": expected,
            "not_done_after_wait": left,
            "delay_ms": args.delay_ms,
            "workers": args.workers,
            "worker_extra": list(getattr(args, "worker_extra", ())),
            "concurrency": args.concurrency,
            "cpu_s": cpu_dict(cpu),
            "target_cpu_s": round(target_cpu, 2),
            # the storm's own per-task costs (cronfleet calibrate --only-tasks --http-storm)
            "target_cpu_ms_per_request": round(1000 * target_cpu / max(1, result["requests"]), 4),
            "worker_threads_cpu_s": by_thread,
            "task_loop_cpu_ms_per_task": round(
                1000 * by_thread.get("task-loop", 0.0) / max(1, done), 4
            ),
            "worker_cpu_ms_per_task": round(1000 * workers / max(1, done), 3),
            "kit_cpu_ms_per_task": round(
                1000 * (cpu.services + cpu.postgres + cpu.kafka) / max(1, done), 3
            ),
            "progress": progress,
            "profile": profile,
            "load": load_line(),
        }
    )
    plot(run_dir / f"{name}.png", result)
    # every run's lag is in the plot and the ledger (*.tsv); the json keeps the figures
    kept = {k: v for k, v in result.items() if k not in BULKY}
    (run_dir / f"{name}.json").write_text(json.dumps(kept, indent=1, default=str))
    return result


BULKY = ("lags", "arrivals")  # one number per run: 180,000 of them in a sustained run


def plot(path: Path, r: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    rows = r["by_second"]
    xs = [row[0] for row in rows]
    a.bar(xs, [row[1] for row in rows], width=0.9, color="#9ab", label="arrivals")
    a.set_xlabel("second of arrival (0 = the first scheduled second)")
    a.set_ylabel("requests arriving" if r["task"] == "http" else "tasks starting")
    a2 = a.twinx()
    a2.plot(xs, [row[3] for row in rows], color="C3", label="p99 lag of that second's arrivals")
    a2.plot(xs, [row[2] for row in rows], color="C1", label="p50")
    a2.set_ylabel("lag (s)")
    a2.legend(loc="upper right")
    a.set_title(f"{r['phase']}: {r['expected']} {r['task']} tasks")
    lags = sorted(r["arrivals"])
    if lags:
        b.plot(lags, [i / len(lags) for i in range(len(lags))])
    b.set_xlabel("arrival lag (s)")
    b.set_ylabel("share of runs")
    b.set_title(f"p99 {r['lag_s'][1]:.2f} s, twice {r['arrived_twice']}, dropped {r['dropped']}")
    b.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def baseline_tree(ref: str) -> str:
    """The kit at `ref`, extracted once per ref into /tmp."""
    target = Path(tempfile.gettempdir()) / f"cf-baseline-{ref}"
    if not (target / "kit").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return str(target)


def row_of(r: dict[str, Any]) -> str:
    lag = " / ".join(f"{x:.2f}" for x in r["lag_s"])
    if "quiet" in r:
        q = r["quiet"]
        qlag = " / ".join(f"{x:.2f}" for x in q["lag_s"])
        return (
            f"| {r['code']} | {q['runs']} | {qlag} | {q['dropped']} | {q['arrived_twice']} | "
            f"{r['expected'] - q['runs']:,} | {lag} | {r['statuses'].get('succeeded', 0):,} | "
            f"{r['dropped']} | {r['arrived_twice']} | {r['not_done_after_wait']} |"
        )
    return (
        f"| {r['code']} | {r['expected']:,} | {lag} | {r['arrived']:,} | {r['dropped']} | "
        f"{r['arrived_twice']} | {r['attempt_2_or_more']} | {r['not_done_after_wait']} | "
        f"{r['worker_cpu_ms_per_task']:.2f} | {r['kit_cpu_ms_per_task']:.2f} | "
        f"{r['cpu_s'].get('postgres_backends', 0)} |"
    )


HEADER = (
    "| code | tasks | lag p50 / p99 / max s | arrived | dropped | arrived twice | "
    "attempt >= 2 | not done | worker CPU ms/task | kit CPU ms/task | PG CPU s |\n"
    "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


NOISY_HEADER = (
    "| code | quiet tasks | quiet lag p50 / p99 / max s | quiet dropped | quiet twice | "
    "noisy tasks | noisy lag p50 / p99 / max s | noisy succeeded | noisy dropped | "
    "noisy twice | not done |\n"
    "| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("burst", "sustain"))
    ap.add_argument("--task", choices=("http", "command"), default="http")
    ap.add_argument("--jobs", type=int, default=5000, help="burst: tasks due at one second")
    ap.add_argument("--rate", type=int, default=1000, help="sustain: tasks per second")
    ap.add_argument("--seconds", type=int, default=180, help="sustain: for this long")
    ap.add_argument("--lead-s", type=int, default=30, help="burst: T = now + this")
    ap.add_argument("--delay-ms", type=int, default=0, help="the target answers this late")
    ap.add_argument("--timeout-s", type=int, default=60, help="each job's timeout_s")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=1024)
    ap.add_argument("--prefetch", type=int, default=0, help="0: the kit's default rule")
    ap.add_argument("--topic-partitions", type=int, default=6)
    ap.add_argument("--max-wait-s", type=float, default=240, help="bound on the wait")
    ap.add_argument(
        "--profile", action="store_true", help="py-spy the scheduler and worker-1 (--gil)"
    )
    ap.add_argument(
        "--trace-starts",
        type=Path,
        help="benchmarks/start_trace in each worker, into DIR/<run> (start_phases.py reads it)",
    )
    ap.add_argument("--series", type=int, default=1, help="rounds (baseline, then this code)")
    ap.add_argument("--baseline-ref", default="", help="also run the kit at this commit")
    ap.add_argument("--quiet-jobs", type=int, default=0, help="burst: another tenant's tasks")
    ap.add_argument(
        "--compare-fair-share",
        action="store_true",
        help="each round: the workers with --no-fair-share, then with fair shares",
    )
    ap.add_argument("--out", type=Path, default=Path("/tmp/cf_http_tasks"))
    args = ap.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    say(f"command: python benchmarks/http_tasks.py {' '.join(sys.argv[1:])}")
    say(f"commit {commit}; {load_line()} at start")
    codes: list[tuple[str, str, tuple[str, ...]]] = [(f"now {commit}", "", ())]
    if args.baseline_ref:
        codes.insert(0, (f"baseline {args.baseline_ref}", baseline_tree(args.baseline_ref), ()))
    if args.compare_fair_share:
        codes = [
            (f"fair-off {commit}", "", ("--no-fair-share",)),
            (f"fair-on {commit}", "", ()),
        ]
    header = NOISY_HEADER if args.quiet_jobs else HEADER
    results = []
    for n in range(1, args.series + 1):
        for label, code, extra in codes:
            tag = f"{label.split()[0]}-{n}"
            say(f"== round {n}: {label} ({load_line()})")
            args.worker_extra = extra
            r = one_run(args, code, tag, args.out)
            r["code"] = f"{label} #{n}"
            results.append(r)
            say(header)
            say(row_of(r))
    say("\nevery run:")
    say(header)
    for r in results:
        say(row_of(r))
    for r in results:
        say(f"{r['phase']}: statuses {r['statuses']}; CPU s {r['cpu_s']}")
        say(
            f"  the target's own CPU {r['target_cpu_s']} s "
            f"({r['target_cpu_ms_per_request'] * 1000:.0f} us per request); the workers' "
            f"task loops {r['task_loop_cpu_ms_per_task'] * 1000:.0f} us per task; by thread "
            f"{r['worker_threads_cpu_s']}"
        )
        for why in r.get("why_attempt_2", []):
            say(f"  a run at attempt 2 or more: {why}")
        for why in r.get("why_twice", []):
            say(f"  a run whose key arrived twice: {why}")
        for who, lines in r.get("profile", {}).items():
            say(f"  py-spy {who}:")
            for line in lines:
                say(f"    {line}")
    (args.out / "summary.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k not in BULKY} for r in results], default=str)
    )
    say(f"{load_line()} at end; data and plots in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
