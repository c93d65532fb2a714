"""The life of a run, measured end to end through the real services as processes:
scheduler node(s), workers and a reaper (`python -m kit.cli ...`) on the local stack's
PostgreSQL and Kafka, `noop` tasks. Not a test: it prints figures and the command.

    python benchmarks/life_of_a_run.py --mode burst --jobs 50000 --nodes 1
    python benchmarks/life_of_a_run.py --mode sustain --rate 2000 --sustain-s 180
    python benchmarks/life_of_a_run.py --mode burst --compare-nodes 2 --out /tmp/life

burst: N one-off jobs all due at one second T, created (COPY, jobs_create_batch) after
  the fleet is up and warm. Dispatch lag (the Kafka timestamp of a run's first message -
  scheduled_at: negative when published ahead of the second, as the scheduler does) and
  start lag (started_at - scheduled_at: the moment the task began on the worker, by its
  estimate of the database's clock); fired (runs inserted),
  dropped (no succeeded run after the bounded wait), duplicated: runs executed more
  than once (attempt > 1: each attempt is claimed at most once, by the conditional
  claim) and run ids published more than once (Kafka messages counted per run id);
  with --ledger every task appends its idempotency key to a file (a `command` task,
  slower: use fewer jobs) and keys seen twice are counted. Time until all succeeded.
sustain: --rate jobs with every_s=1 (so --rate runs/s) for --sustain-s seconds, then
  their triggers are deleted and the backlog drained. Start lag p50/p99 per 10 s of
  scheduled time, CPU seconds per run of the services (user+sys of each process from
  /proc), and of the PostgreSQL backends serving the scratch database (the broker's
  CPU is the whole broker's, which other users of the stack share).

--tenants N spreads the jobs over N tenants (bench-000 ...) in turn, with a tenant policy
giving them weights 1 to 4 and every tenth the paid class, so that fair shares have
tenants to share between (their cost with many tenants); 1 (the default): tenant `bench`.

Each phase has its own scratch database (migrated, dropped at the end) and topic
prefix. --profile samples the first scheduler and worker with py-spy (pip install
py-spy) and prints their hottest frames. --out DIR writes PNG plots and the raw data.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from kit.core.defaults import SCAN_AHEAD_MS
from kit.core.dispatch import PRIORITY_TIERS
from kit.core.policies import MisfirePolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import IntervalSchedule, OneOffSchedule
from kit.runall import Fleet, Service
from kit.settings import cronfleet_home, load_settings
from kit.store import migrate
from kit.store.jobs import JobSpec, jobs_create_batch
from kit.tasks.policy import local_policy_toml
from kit.transport import RunMessage, ensure_topics, topic_for

BENCH_APP = "cf-bench-driver"  # this script's own connections, excluded from the CPU
CHUNK = 10_000


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def say(line: str = "") -> None:
    print(line, flush=True)


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


# -- CPU accounting --------------------------------------------------------------------


def cpu_of(pids: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return out


def backend_pids(engine: Engine, database: str) -> list[int]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = :d "
                    "AND application_name IS DISTINCT FROM :app"
                ),
                {"d": database, "app": BENCH_APP},
            ).scalars()
        )


def kafka_pid() -> int | None:
    try:
        return int((cronfleet_home() / "kafka" / "kafka.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class CpuWindow:
    """CPU seconds used between start() and stop() by the services, the PostgreSQL
    backends of the scratch database and the broker."""

    services: float = 0.0
    postgres: float = 0.0
    kafka: float = 0.0
    by_service: dict[str, float] = field(default_factory=dict)
    machine: float = 0.0  # every process's CPU (all of /proc/stat but idle, iowait, steal)
    steal: float = 0.0
    me: float = 0.0  # this benchmark's own process (its progress polls)
    _start: dict[str, dict[int, float]] = field(default_factory=dict)
    _machine0: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @staticmethod
    def _machine_now() -> tuple[float, float, float]:
        t = psutil.cpu_times()
        busy = sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))
        me = psutil.Process().cpu_times()
        return busy, getattr(t, "steal", 0.0), me.user + me.system

    def start(self, fleet: Fleet, engine: Engine, database: str) -> None:
        k = kafka_pid()
        self._machine0 = self._machine_now()
        self._start = {
            "svc": cpu_of(fleet.pids()),
            "pg": cpu_of(backend_pids(engine, database)),
            "kafka": cpu_of([k] if k else []),
        }

    def stop(self, fleet: Fleet, engine: Engine, database: str) -> None:
        busy, steal, me = self._machine_now()
        self.machine = busy - self._machine0[0]
        self.steal = steal - self._machine0[1]
        self.me = me - self._machine0[2]
        end = cpu_of(fleet.pids())
        names = {c.proc.pid: c.service.name for c in fleet.children}
        for pid, t in end.items():
            used = t - self._start["svc"].get(pid, 0.0)
            self.services += used
            kind = names[pid].rstrip("0123456789").rstrip("-")
            self.by_service[kind] = self.by_service.get(kind, 0.0) + used
        pg = cpu_of(backend_pids(engine, database))
        self.postgres = sum(t - self._start["pg"].get(pid, 0.0) for pid, t in pg.items())
        k = kafka_pid()
        kafka = cpu_of([k] if k else [])
        self.kafka = sum(t - self._start["kafka"].get(pid, 0.0) for pid, t in kafka.items())


# -- profiling ---------------------------------------------------------------------------


class Profiler:
    """py-spy record on some service pids, stopped with SIGINT; hottest frames."""

    def __init__(
        self, out_dir: Path, targets: dict[str, int], rate: int = 50, gil: bool = False
    ) -> None:
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        spy = shutil.which("py-spy")
        if spy is None:
            say("(py-spy not installed: no profile; pip install py-spy)")
            return
        for name, pid in targets.items():
            path = out_dir / f"pyspy-{name}.txt"
            argv = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking"]
            argv += ["--format", "raw", "--threads", "-o", str(path)]
            argv += ["--gil"] if gil else []  # only the thread holding the interpreter lock
            self.procs[name] = (
                subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                path,
            )

    def stop(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, (proc, path) in self.procs.items():
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                continue
            if path.exists():
                out[name] = summarise_profile(path)
        return out


def summarise_profile(path: Path, top: int = 8) -> list[str]:
    """Self time by leaf frame and inclusive time by kit.* function, from py-spy's
    collapsed stacks; idle waits are counted apart so the busy share is visible."""
    self_t: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = idle = 0
    idle_words = ("wait (threading", "select (", "poll (", "_wait_for_tstate_lock", "sleep")
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        count = int(n)
        frames = stack.split(";")
        total += count
        leaf = frames[-1]
        if any(w in leaf for w in idle_words) or "consume (" in leaf:
            idle += count
            continue
        self_t[leaf] += count
        for f in {f for f in frames if "kit/" in f}:
            incl[f] += count
    busy = max(1, total - idle)
    lines = [f"samples {total}, idle/blocked {idle} ({100 * idle / max(1, total):.0f}%)"]
    lines += [f"  self {100 * c / busy:5.1f}%  {f}" for f, c in self_t.most_common(top)]
    lines += [f"  incl {100 * c / busy:5.1f}%  {f}" for f, c in incl.most_common(top)]
    return lines


# -- one phase: scratch database, topics, services ----------------------------------------


@dataclass
class Phase:
    name: str
    url: str
    database: str
    prefix: str
    engine: Engine
    fleet: Fleet
    log: Path
    bootstrap: str
    partitions: int


@contextmanager
def phase(
    name: str,
    args: argparse.Namespace,
    nodes: int,
    out_dir: Path,
    *,
    env_extra: dict[str, str] | None = None,
    commands: tuple[str, ...] = ("/bin/sh",),
) -> Iterator[Phase]:
    """A scratch database and topics, the fleet's processes on them (with `env_extra`
    added to their environment: another PYTHONPATH runs another kit), warmed up."""
    settings = load_settings()
    admin_url = make_url(settings.database_url)
    database = f"cf_bench_life_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{database}"'))
    url = admin_url.set(database=database).render_as_string(hide_password=False)
    prefix = f"cf_bench_life.{uuid.uuid4().hex[:8]}"
    partitions = args.topic_partitions
    engine = create_engine(
        url, pool_size=4, connect_args={"application_name": BENCH_APP}, pool_pre_ping=True
    )
    log = out_dir / f"{name}.services.log"
    policy = out_dir / "tasks.toml"  # --ledger: the bench tenant may run /bin/sh
    policy.write_text(  # as nobody where root
        "\n".join(local_policy_toml(t, commands) for t in tenant_names(getattr(args, "tenants", 1)))
    )
    shares = out_dir / "tenants.toml"
    shares.write_text(tenants_toml(getattr(args, "tenants", 1)))
    env = {
        **os.environ,
        "CRONFLEET_TASK_POLICY_FILE": str(policy),
        "CRONFLEET_TENANT_POLICY_FILE": str(shares),
        "CRONFLEET_DATABASE_URL": url,
        "CRONFLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CRONFLEET_RUN_TOPIC_PARTITIONS": str(partitions),
        "CRONFLEET_LOG_LEVEL": "WARNING",
        **(env_extra or {}),
    }
    log_file = log.open("w")
    fleet = Fleet(out=log_file, env=env)
    try:
        migrate.upgrade(url)
        ensure_topics(settings.kafka_bootstrap, partitions, prefix=prefix)
        common = ("--topic-prefix", prefix)
        for i in range(nodes):
            fleet.start(Service(f"scheduler-{i + 1}", ("scheduler", *common)))
        fleet.start(Service("reaper", ("reaper", *common, "--group-id", f"g-{prefix}")))
        # each worker may claim its share of a burst ahead of its second
        prefetch = args.prefetch or max(10_000, args.jobs // max(1, args.workers) + 1_000)
        for i in range(args.workers):
            worker = ("worker", *common, "--concurrency", str(args.concurrency))
            worker += ("--group-id", f"g-{prefix}", "--drain-s", "10")
            worker += ("--prefetch", str(prefetch))
            worker += tuple(getattr(args, "worker_extra", ()))  # e.g. --no-fair-share
            fleet.start(Service(f"worker-{i + 1}", worker))
        p = Phase(
            name, url, database, prefix, engine, fleet, log, settings.kafka_bootstrap, partitions
        )
        warm_up(p)
        yield p
    finally:
        fleet.stop(timeout_s=60)
        log_file.close()
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()
        client = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
        topics = [t for t in client.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
        if topics:
            for future in client.delete_topics(topics).values():
                try:
                    future.result(timeout=30)
                except Exception as exc:  # a leftover topic is not worth failing over
                    say(f"(could not delete a topic: {exc})")


def db_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def tenant_names(count: int) -> list[str]:
    return ["bench"] if count <= 1 else [f"bench-{i:03d}" for i in range(count)]


def tenants_toml(count: int) -> str:
    """Weights 1-4 in turn and every tenth tenant paid; tenant `bench` alone: no limit."""
    lines: list[str] = []
    for i, name in enumerate(tenant_names(count)):
        lines += [f'[tenants."{name}"]', 'tiers = ["critical", "high", "normal", "low"]']
        if count > 1:
            lines += [f"weight = {1 + i % 4}", f'class = "{"paid" if i % 10 == 0 else "free"}"']
        lines.append("")
    return "\n".join(lines)


def create_spread(engine: Any, chunk: list[JobSpec], tenants: int, now: datetime) -> None:
    """The chunk's jobs, dealt to the tenants in turn (one batch per tenant)."""
    names = tenant_names(tenants)
    for k, name in enumerate(names):
        mine = chunk[k :: len(names)]
        if mine:
            jobs_create_batch(engine, name, mine, now=now)


def spec(name: str, schedule: Any, task: dict[str, Any]) -> JobSpec:
    return JobSpec(
        name=name,
        schedule=schedule,
        task=task,
        retry=RetryPolicy().to_dict(),
        misfire=MisfirePolicy().to_dict(),
    )


def check_alive(p: Phase) -> None:
    dead = p.fleet.dead()
    if dead:
        names = ", ".join(f"{c.service.name} (code {c.proc.returncode})" for c in dead)
        raise SystemExit(f"{p.name}: {names} died; see {p.log}")


def warm_up(p: Phase, timeout_s: float = 120.0) -> None:
    """One job through the whole path, so topics, leases and consumer groups are up."""
    at = (db_now(p.engine) + timedelta(seconds=2)).replace(microsecond=0)
    jobs_create_batch(p.engine, "warm", [spec("warm", OneOffSchedule(at), {"type": "noop"})])
    deadline = time.monotonic() + timeout_s
    while scalar(p.engine, "SELECT count(*) FROM runs WHERE status = 'succeeded'") < 1:
        check_alive(p)
        if time.monotonic() > deadline:
            raise SystemExit(f"{p.name}: the warm-up run did not succeed; see {p.log}")
        time.sleep(0.5)


def kafka_counts(p: Phase) -> tuple[Counter[str], dict[str, int]]:
    """Messages per run id on every partition of every tier topic, and the Kafka
    timestamp (ms, the producer's create time) of each run id's first message."""
    consumer = Consumer({"bootstrap.servers": p.bootstrap, "group.id": uuid.uuid4().hex})
    seen: Counter[str] = Counter()
    first_ms: dict[str, int] = {}
    topics = consumer.list_topics(timeout=10).topics
    for tier in PRIORITY_TIERS:
        topic = topic_for(tier, p.prefix)
        for part in sorted(topics[topic].partitions) if topic in topics else []:
            tp = TopicPartition(topic, part, 0)
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(tp.topic, part, low)])
            got, deadline = low, time.monotonic() + 60
            while got < high and time.monotonic() < deadline:
                for msg in consumer.consume(10_000, 1.0):
                    if msg.error():
                        continue
                    rid = RunMessage.from_bytes(msg.value()).run_id
                    seen[rid] += 1
                    first_ms.setdefault(rid, msg.timestamp()[1])
                    got = msg.offset() + 1
    consumer.close()
    return seen, first_ms


# -- burst -------------------------------------------------------------------------------


def burst(args: argparse.Namespace, nodes: int, out_dir: Path) -> dict[str, Any]:
    name = f"burst-{nodes}node"
    with phase(name, args, nodes, out_dir) as p:
        ledger = out_dir / f"{name}.ledger"
        if args.ledger:
            ledger.unlink(missing_ok=True)
            ledger.touch()
            ledger.chmod(0o666)  # the tasks' run-as user appends to it
            body = f'echo "$CRONFLEET_IDEMPOTENCY_KEY" >> "{ledger}"'
            task: dict[str, Any] = {"type": "command", "argv": ["/bin/sh", "-c", body]}
        else:
            task = {"type": "noop"}
        created_at = time.monotonic()
        now = db_now(p.engine)
        at = (now + timedelta(seconds=args.lead_s)).replace(microsecond=0)
        for i in range(0, args.jobs, CHUNK):
            chunk = [
                spec(f"b{j}", OneOffSchedule(at), task) for j in range(i, min(args.jobs, i + CHUNK))
            ]
            create_spread(p.engine, chunk, args.tenants, now)
        load_s = time.monotonic() - created_at
        margin = (at - db_now(p.engine)).total_seconds()
        say(f"[{name}] created {args.jobs} jobs in {load_s:.1f} s; due {at} ({margin:.1f} s ahead)")
        beats = heartbeat_phases(p.fleet, at.timestamp())
        if beats:
            say(f"[{name}] each worker's first heartbeat from T - 1 s: T{beats}")
        if margin < 7:
            say(f"[{name}] WARNING: less than scan-ahead + 2 s left; raise --lead-s")
        cpu = CpuWindow()
        cpu.start(p.fleet, p.engine, p.database)
        # CPU by phase (the model's calibration, sim/storm.py): idle until the scan can
        # reach T, then scan-ahead up to T (scan, insert, publish, claim, hold), then after
        # T (start, finish); each phase's wall seconds beside it
        ahead_s = SCAN_AHEAD_MS / 1000 + 0.5
        phases: dict[str, dict[str, float]] = {}
        window = CpuWindow()
        window.start(p.fleet, p.engine, p.database)
        window_name, window_from = "idle", -margin
        profiler = Profiler(out_dir, profile_targets(p)) if args.profile else None
        progress: list[tuple[float, int, int, int]] = []  # s after T, claimed, started, ok
        deadline = time.monotonic() + margin + args.max_wait_s
        ok = 0
        while time.monotonic() < deadline:
            check_alive(p)
            with p.engine.connect() as conn:
                row = conn.execute(
                    text(
                        "SELECT count(*) FILTER (WHERE status <> 'pending'), count(started_at), "
                        "count(*) FILTER (WHERE status = 'succeeded'), now() "
                        "FROM runs WHERE tenant LIKE 'bench%'"
                    )
                ).one()
            ok = row[2]
            progress.append(((row[3] - at).total_seconds(), row[0], row[1], ok))
            since_t = progress[-1][0]
            nxt = {"idle": ("ahead", -ahead_s), "ahead": ("after", 0.0)}.get(window_name)
            if nxt is not None and since_t >= nxt[1]:
                window.stop(p.fleet, p.engine, p.database)
                phases[window_name] = {**cpu_dict(window), "wall_s": since_t - window_from}
                window = CpuWindow()
                window.start(p.fleet, p.engine, p.database)
                window_name, window_from = nxt[0], since_t
            if ok >= args.jobs:
                break
            time.sleep(0.25)
        profile = profiler.stop() if profiler else {}
        cpu.stop(p.fleet, p.engine, p.database)
        window.stop(p.fleet, p.engine, p.database)
        phases[window_name] = {
            **cpu_dict(window),
            "wall_s": (progress[-1][0] if progress else 0.0) - window_from,
        }
        with p.engine.connect() as conn:
            got = conn.execute(
                text(
                    "SELECT run_id::text, extract(epoch FROM scheduled_at), "
                    "extract(epoch FROM started_at - scheduled_at), attempt, status, "
                    "extract(epoch FROM finished_at - scheduled_at) "
                    "FROM runs WHERE tenant LIKE 'bench%'"
                )
            ).all()
            # each worker's share and its start lag p50 / p99 / max (the burst's p99 is the
            # slower worker's last starts)
            by_worker = {
                w: {"runs": n, "start_lag_s": [float(a or 0), float(b or 0), float(c or 0)]}
                for w, n, a, b, c in conn.execute(
                    text(
                        "SELECT coalesce(worker_id, '-'), count(*), "
                        "percentile_disc(0.5) WITHIN GROUP (ORDER BY lag), "
                        "percentile_disc(0.99) WITHIN GROUP (ORDER BY lag), max(lag) FROM "
                        "(SELECT worker_id, extract(epoch FROM started_at - scheduled_at) "
                        "AS lag FROM runs WHERE tenant LIKE 'bench%') r GROUP BY 1 ORDER BY 1"
                    )
                ).all()
            }
        sent, first_ms = kafka_counts(p)
        dispatch = [first_ms[r[0]] / 1000 - float(r[1]) for r in got if r[0] in first_ms]
        start = [float(r[2]) for r in got if r[2] is not None]
        finished = [float(r[5]) for r in got if r[4] == "succeeded"]
        got = [r[2:] for r in got]  # (start lag, attempt, status, finish) below
        keys = Counter(ledger.read_text().split()) if args.ledger and ledger.exists() else None
        result = {
            "phase": name,
            "jobs": args.jobs,
            "nodes": nodes,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "fired": len(got),
            "succeeded": ok,
            "dropped": args.jobs - ok,
            "executed_twice": sum(1 for r in got if r[1] > 1),
            "published_twice": sum(1 for v in sent.values() if v > 1),
            "messages": sum(sent.values()),
            "ledger_twice": None if keys is None else sum(1 for v in keys.values() if v > 1),
            "ledger_keys": None if keys is None else len(keys),
            "dispatch_lag_s": [pct(dispatch, 0.5), pct(dispatch, 0.99), max(dispatch, default=0)],
            "start_lag_s": [pct(start, 0.5), pct(start, 0.99), max(start, default=0)],
            "all_succeeded_s": max(finished) if ok >= args.jobs and finished else None,
            # when the runs were published (first message's broker timestamp) and claimed,
            # against T: the scan-ahead's timeline (sim/storm.py models it)
            "dispatch_lag_quantiles_s": {
                str(q): pct(dispatch, q) for q in (0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
            },
            "progress": [  # s after T (database clock), runs claimed, started, succeeded
                [round(t, 3), c, st, o] for t, c, st, o in progress
            ],
            "kit_imported": kit_imported(p.fleet),
            "heartbeat_phase_s": beats,
            "runs_by_worker": by_worker,
            "cpu_s": cpu_dict(cpu),
            "cpu_ms_per_run": 1000 * cpu.services / max(1, ok),
            "cpu_by_phase_s": phases,
            "profile": profile,
            "load": load_line(),
        }
        if args.out:
            plot_burst(out_dir / f"{name}.png", name, progress, start)
            (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2, default=str))
        return result


def heartbeat_phases(fleet: Fleet, t: float, period_s: float | None = None) -> dict[str, float]:
    """When each worker's heartbeat thread beats first from T - 1 s on, seconds from T: it
    beats every ttl/3 from its start (kit.worker.Worker._heartbeat_loop), and its first
    beat after T extends every run started by then (sim/storm.py models it: a beat during
    the second's starts takes the hold thread's interpreter lock). The thread is named by
    `py-spy dump` (none without py-spy), its start read from /proc (10 ms ticks) against the
    uptime."""
    spy = shutil.which("py-spy")
    if spy is None:
        return {}
    if period_s is None:
        period_s = load_settings().run_lease_ttl_ms / 3000
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for c in fleet.children:
        if not c.service.name.startswith("worker"):
            continue
        dump = subprocess.run(
            [spy, "dump", "--pid", str(c.proc.pid)], capture_output=True, text=True, check=False
        ).stdout
        tid = next(
            (
                int(m)
                for m, n in re.findall(r'Thread (\d+) \([^)]*\): "([^"]+)"', dump)
                if n == "heartbeat"
            ),
            None,
        )
        if tid is None:
            continue
        try:
            stat = Path(f"/proc/{c.proc.pid}/task/{tid}/stat").read_text()
            uptime = float(Path("/proc/uptime").read_text().split()[0])
        except (OSError, ValueError):
            continue
        # its start in ticks since boot, against the uptime now (the same clock)
        started = time.time() - (uptime - int(stat.rsplit(")", 1)[1].split()[19]) / tick)
        out[c.service.name] = round((started - (t - 1.0)) % period_s - 1.0, 3)
    return out


THIS_TREE = Path(__file__).resolve().parents[1]


def kit_imported(fleet: Fleet) -> dict[str, str]:
    """Where each service process imports the kit from: `python -m` puts its working
    directory ahead of PYTHONPATH, so a benchmark run elsewhere runs another tree
    ("this tree": the tree this script is in; another one is named by its path)."""
    out: dict[str, str] = {}
    for c in fleet.children:
        pid = c.proc.pid
        try:
            paths = [os.readlink(f"/proc/{pid}/cwd")]
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(b"PYTHONPATH="):
                paths += [x for x in item[11:].decode().split(":") if x]
        found = next((q for q in paths if (Path(q) / "kit" / "__init__.py").exists()), None)
        if found is None:
            out[c.service.name] = "site-packages"
        elif Path(found).resolve() == THIS_TREE:
            out[c.service.name] = "this tree"  # no machine path in the results kept
        else:
            out[c.service.name] = str(Path(found) / "kit")
    return out


def profile_targets(p: Phase) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in p.fleet.children:
        if c.service.name in ("scheduler-1", "worker-1"):
            out[c.service.name] = c.proc.pid
    return out


def cpu_dict(cpu: CpuWindow) -> dict[str, float]:
    out = {
        **{k: round(v, 1) for k, v in sorted(cpu.by_service.items())},
        "services": round(cpu.services, 1),
        "postgres_backends": round(cpu.postgres, 1),
        "kafka_broker": round(cpu.kafka, 1),
    }
    if cpu.machine:  # the whole machine's busy CPU and the hypervisor's steal, same window
        out["machine_busy"] = round(cpu.machine, 2)
        out["machine_steal"] = round(cpu.steal, 2)
        out["this_benchmark"] = round(cpu.me, 2)
    return out


# -- sustained ---------------------------------------------------------------------------


def sustain(args: argparse.Namespace, nodes: int, out_dir: Path) -> dict[str, Any]:
    name = f"sustain-{args.rate}per_s-{nodes}node"
    with phase(name, args, nodes, out_dir) as p:
        now = db_now(p.engine)
        t0 = (now + timedelta(seconds=12)).replace(microsecond=0)
        for i in range(0, args.rate, CHUNK):
            chunk = [
                spec(f"s{j}", IntervalSchedule(1, t0), {"type": "noop"})
                for j in range(i, min(args.rate, i + CHUNK))
            ]
            create_spread(p.engine, chunk, args.tenants, now)
        t1 = t0 + timedelta(seconds=args.sustain_s)
        say(f"[{name}] {args.rate} jobs every second from {t0} to {t1}")
        while db_now(p.engine) < t0:
            time.sleep(0.2)
        cpu = CpuWindow()
        cpu.start(p.fleet, p.engine, p.database)
        profiler = Profiler(out_dir, profile_targets(p)) if args.profile else None
        loads: list[float] = []
        while db_now(p.engine) < t1:
            check_alive(p)
            loads.append(os.getloadavg()[0])
            time.sleep(1.0)
        # stop the load: no trigger fires again; what was scanned is still dispatched
        with p.engine.begin() as conn:
            conn.execute(text("DELETE FROM triggers"))
        drain_deadline = time.monotonic() + args.max_wait_s
        pending = -1
        while time.monotonic() < drain_deadline:
            check_alive(p)
            pending = scalar(
                p.engine,
                "SELECT count(*) FROM runs WHERE tenant LIKE 'bench%' AND scheduled_at < :t1 "
                "AND status NOT IN ('succeeded', 'dead', 'skipped', 'cancelled')",
                t1=t1,
            )
            if pending == 0:
                break
            time.sleep(0.5)
        drained_s = (db_now(p.engine) - t1).total_seconds()
        profile = profiler.stop() if profiler else {}
        cpu.stop(p.fleet, p.engine, p.database)
        with p.engine.connect() as conn:
            buckets = conn.execute(
                text(
                    """
                    SELECT floor(extract(epoch FROM scheduled_at - :t0)) AS s, count(*),
                      count(*) FILTER (WHERE status = 'succeeded'),
                      percentile_cont(0.5) WITHIN GROUP (ORDER BY
                        extract(epoch FROM started_at - scheduled_at)),
                      percentile_cont(0.99) WITHIN GROUP (ORDER BY
                        extract(epoch FROM started_at - scheduled_at)),
                      max(extract(epoch FROM started_at - scheduled_at))
                    FROM runs WHERE tenant LIKE 'bench%' AND scheduled_at >= :t0
                      AND scheduled_at < :t1
                    GROUP BY 1 ORDER BY 1
                    """
                ),
                {"t0": t0, "t1": t1},
            ).all()
            overall = conn.execute(
                text(
                    """
                    SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'),
                      count(*) FILTER (WHERE attempt > 1),
                      percentile_cont(0.5) WITHIN GROUP (ORDER BY
                        extract(epoch FROM started_at - scheduled_at)),
                      percentile_cont(0.99) WITHIN GROUP (ORDER BY
                        extract(epoch FROM started_at - scheduled_at)),
                      max(extract(epoch FROM started_at - scheduled_at))
                    FROM runs WHERE tenant LIKE 'bench%' AND scheduled_at >= :t0
                      AND scheduled_at < :t1
                    """
                ),
                {"t0": t0, "t1": t1},
            ).one()
        expected = args.rate * args.sustain_s
        series = [
            (
                float(b[0]),
                int(b[1]),
                int(b[2]),
                float(b[3] or 0),
                float(b[4] or 0),
                float(b[5] or 0),
            )
            for b in buckets
        ]
        per10: list[list[Any]] = []
        for lo in range(0, args.sustain_s, 10):
            rows = [s for s in series if lo <= s[0] < lo + 10]
            if rows:
                per10.append(
                    [lo, sum(r[1] for r in rows), max(r[4] for r in rows), max(r[5] for r in rows)]
                )
        result = {
            "phase": name,
            "rate": args.rate,
            "seconds": args.sustain_s,
            "nodes": nodes,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "expected_runs": expected,
            "runs": int(overall[0]),
            "succeeded": int(overall[1]),
            "executed_twice": int(overall[2]),
            "not_finished_after_drain": pending,
            "drained_s_after_end": round(drained_s, 1),
            "achieved_runs_per_s": round(int(overall[1]) / args.sustain_s, 1),
            "start_lag_p50_s": float(overall[3] or float("nan")),
            "start_lag_p99_s": float(overall[4] or float("nan")),
            "start_lag_max_s": float(overall[5] or float("nan")),
            "per_10s": per10,  # [second, runs, worst p99 of a second, max]
            "cpu_s": cpu_dict(cpu),
            "cpu_ms_per_run": 1000 * cpu.services / max(1, int(overall[1])),
            "pg_cpu_ms_per_run": 1000 * cpu.postgres / max(1, int(overall[1])),
            "load_mean": round(sum(loads) / max(1, len(loads)), 2),
            "profile": profile,
            "load": load_line(),
        }
        if args.out:
            plot_sustain(out_dir / f"{name}.png", name, series)
            (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2, default=str))
        return result


# -- plots and tables -----------------------------------------------------------------------


def plot_burst(path: Path, name: str, progress: list[tuple], start: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [p[0] for p in progress]
    for i, label in ((1, "claimed"), (2, "started"), (3, "succeeded")):
        a.plot(xs, [p[i] for p in progress], label=label)
    a.set_xlabel("seconds after the burst second T")
    a.set_ylabel("runs")
    a.legend()
    a.set_title(name)
    b.hist(start, bins=60)
    b.set_xlabel("start lag (s)")
    b.set_ylabel("runs")
    b.set_title("start lag distribution")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_sustain(path: Path, name: str, series: list[tuple]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    xs = [s[0] for s in series]
    a.plot(xs, [s[3] for s in series], label="p50")
    a.plot(xs, [s[4] for s in series], label="p99")
    a.axhline(2.0, color="grey", linestyle="--", label="2 s target")
    a.set_ylabel("start lag (s)")
    a.legend()
    a.set_title(name)
    b.plot(xs, [s[1] for s in series], label="runs scheduled")
    b.plot(xs, [s[2] for s in series], label="succeeded")
    b.set_xlabel("scheduled second since start")
    b.set_ylabel("runs per second")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fmt3(v: list[float]) -> str:
    return " / ".join("nan" if math.isnan(x) else f"{x:.2f}" for x in v)


def print_burst(results: list[dict[str, Any]]) -> None:
    cols = [r["phase"] for r in results]
    rows = [
        ("jobs (all due at T)", [r["jobs"] for r in results]),
        (
            "nodes / workers x conc.",
            [f"{r['nodes']} / {r['workers']}x{r['concurrency']}" for r in results],
        ),
        ("dispatch lag p50/p99/max s", [fmt3(r["dispatch_lag_s"]) for r in results]),
        ("start lag p50/p99/max s", [fmt3(r["start_lag_s"]) for r in results]),
        ("fired (runs inserted)", [r["fired"] for r in results]),
        ("succeeded", [r["succeeded"] for r in results]),
        ("dropped", [r["dropped"] for r in results]),
        ("executed twice (attempt>1)", [r["executed_twice"] for r in results]),
        ("published twice", [r["published_twice"] for r in results]),
        ("ledger keys / twice", [f"{r['ledger_keys']} / {r['ledger_twice']}" for r in results]),
        ("all succeeded after T, s", [r["all_succeeded_s"] for r in results]),
        ("CPU ms per run (services)", [f"{r['cpu_ms_per_run']:.2f}" for r in results]),
        ("CPU s by process", [r["cpu_s"] for r in results]),
        ("first / last published, s", [first_last(r) for r in results]),
        ("all claimed, s", [all_claimed(r) for r in results]),
        ("kit imported from", [sorted(set(r["kit_imported"].values())) for r in results]),
    ]
    table(cols, rows)


def first_last(r: dict[str, Any]) -> str:
    q = r.get("dispatch_lag_quantiles_s", {})
    return f"T{q.get('0.0', float('nan')):+.2f} / T{r['dispatch_lag_s'][2]:+.2f}"


def all_claimed(r: dict[str, Any]) -> str:
    """The first progress poll that saw every run claimed (every 0.25 s)."""
    at = next((t for t, c, _, _ in r.get("progress", []) if c >= r["jobs"]), None)
    return "-" if at is None else f"by T{at:+.2f}"


def print_sustain(results: list[dict[str, Any]]) -> None:
    cols = [r["phase"] for r in results]
    keys = [
        "expected_runs",
        "runs",
        "succeeded",
        "achieved_runs_per_s",
        "executed_twice",
        "not_finished_after_drain",
        "drained_s_after_end",
        "start_lag_p50_s",
        "start_lag_p99_s",
        "start_lag_max_s",
        "cpu_ms_per_run",
        "pg_cpu_ms_per_run",
        "cpu_s",
        "load_mean",
    ]
    table(cols, [(k, [r[k] for r in results]) for k in keys])
    for r in results:
        say(f"{r['phase']}: start lag per 10 s [second, runs, worst per-second p99, max]:")
        for row in r["per_10s"]:
            say(f"  {row[0]:4d}s  {row[1]:7d}  p99 {row[2]:7.2f}  max {row[3]:7.2f}")


def table(cols: list[str], rows: list[tuple[str, list[Any]]]) -> None:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)

    width = max(len(r[0]) for r in rows)
    colw = [max(len(c), *(len(cell(r[1][i])) for r in rows)) for i, c in enumerate(cols)]
    say(" " * width + "  " + "  ".join(c.ljust(w) for c, w in zip(cols, colw, strict=True)))
    for label, values in rows:
        cells = "  ".join(cell(v).ljust(w) for v, w in zip(values, colw, strict=True))
        say(label.ljust(width) + "  " + cells)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("burst", "sustain", "both"), default="both")
    ap.add_argument("--jobs", type=int, default=50_000, help="burst size")
    ap.add_argument("--lead-s", type=int, default=40, help="burst second T = now + this")
    ap.add_argument("--nodes", type=int, default=1, help="scheduler processes")
    ap.add_argument("--compare-nodes", type=int, default=0, help="burst again with this many")
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes (one consumer group)",
    )
    ap.add_argument("--concurrency", type=int, default=32, help="runs per worker at once")
    ap.add_argument(
        "--prefetch", type=int, default=0, help="runs a worker claims ahead (0: its burst share)"
    )
    ap.add_argument("--topic-partitions", type=int, default=6)
    ap.add_argument("--rate", type=int, default=2000, help="sustained runs/s (jobs every 1 s)")
    ap.add_argument("--sustain-s", type=int, default=180)
    ap.add_argument("--max-wait-s", type=float, default=180, help="bound on every drain")
    ap.add_argument("--ledger", action="store_true", help="command tasks append to a ledger")
    ap.add_argument("--tenants", type=int, default=1, help="jobs spread over this many tenants")
    ap.add_argument("--profile", action="store_true", help="py-spy the scheduler and worker")
    ap.add_argument("--out", type=Path, help="write PNG plots and JSON here")
    args = ap.parse_args()
    out_dir = args.out or Path(f"/tmp/cf_bench_life_{os.getpid()}")
    out_dir.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    say(f"command: python benchmarks/life_of_a_run.py {' '.join(sys.argv[1:])}")
    say(f"commit {commit or '?'}; {load_line()} at start")
    if args.mode in ("burst", "both"):
        results = [burst(args, args.nodes, out_dir)]
        if args.compare_nodes:
            results.append(burst(args, args.compare_nodes, out_dir))
        print_burst(results)
        print_profiles(results)
    if args.mode in ("sustain", "both"):
        results = [sustain(args, args.nodes, out_dir)]
        print_sustain(results)
        print_profiles(results)
    say(f"{load_line()} at end; logs and data in {out_dir}")
    return 0


def print_profiles(results: list[dict[str, Any]]) -> None:
    for r in results:
        for name, lines in r.get("profile", {}).items():
            say(f"{r['phase']} py-spy {name}:")
            buf = io.StringIO()
            for line in lines:
                buf.write(line + "\n")
            say(buf.getvalue().rstrip())


if __name__ == "__main__":
    sys.exit(main())
