"""Run a drill from start to verdict: a fresh database and topics on the drills' stack,
the witness installed, the fleet started, the workload created, N fault cycles, the
workload stopped, the fleet let go quiet, the history read and audited, the model asked
for its prediction of the same fault, and the report written."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from chaos import instrument, ledger
from chaos.audit import Audit, audit
from chaos.drill import Drill, DrillContext, DrillSetupError, Timings
from chaos.fleet import DrillFleet, ServiceSpec, wait_for
from chaos.history import history_read
from chaos.records import History, Params
from chaos.stack import ChaosStack
from chaos.workload import TENANT, Workload
from kit.tasks.policy import local_policy_toml, local_run_as
from kit.tasks.tenant_policy import local_tenants_toml
from kit.transport.progress import QueueProgress

QUIET_TIMEOUT_S = 120.0
TOPICS = "chaos"  # a drill's run topics: chaos.<tag>.<tier>
GROUPS = "chaos"  # its workers' consumer groups: chaos-<tag>.<tier>
BUSY = "('pending', 'running', 'retry_scheduled')"


@dataclass
class RunOptions:
    cycles: int
    seed: int
    out: Path
    plants: dict[str, str] = field(default_factory=dict)  # role -> wrapper module
    timings: Timings = field(default_factory=Timings)
    model: bool = True
    keep_db: bool = False  # keep the drill's database and topics (to look at them)
    target: Any = None  # chaos.target.Target: a deployed fleet instead of the drills' own


@dataclass
class DrillResult:
    drill: str
    seed: int
    cycles: int
    passed: bool
    error: str | None
    audit: Audit | None
    history: History | None
    model: dict[str, Any] | None
    exits: list[str]
    notes: list[str]
    out: Path
    wall_s: float
    command: str

    def to_json(self) -> dict[str, Any]:
        return {
            "drill": self.drill,
            "seed": self.seed,
            "cycles": self.cycles,
            "passed": self.passed,
            "error": self.error,
            "command": self.command,
            "wall_s": round(self.wall_s, 1),
            "audit": self.audit.to_json() if self.audit else None,
            "model": self.model,
            "service_exits": self.exits,
            "notes": self.notes,
        }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _progress(name: str, done: int, cycles: int, started: float) -> None:
    """A line per cycle on stderr (a 100-cycle drill takes half an hour): done, elapsed,
    and the time left at the pace so far."""
    elapsed = time.monotonic() - started
    left = elapsed / done * (cycles - done)
    print(f"chaos: {name}: cycle {done}/{cycles}, {elapsed / 60:.1f} min, about "
          f"{left / 60:.1f} min of cycles left", file=sys.stderr, flush=True)  # fmt: skip


def run_drill(drill: Drill, stack: ChaosStack, opts: RunOptions, command: str) -> DrillResult:
    started = time.monotonic()
    # absolute: tasks run in a directory of their own and are handed the ledger's path
    out = opts.out.resolve() / drill.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tag = f"{drill.number}{int(time.time()) % 100000:05d}"
    db_name = f"chaos_{drill.name.replace('-', '_')}"
    ctx: DrillContext | None = None
    error: str | None = None
    history: History | None = None
    result_audit: Audit | None = None
    try:
        if opts.target is not None:
            ctx = _target_context(drill, stack, opts, out, tag)
        else:
            ctx = _context(drill, stack, opts, out, tag, db_name)
        try:
            drill.setup(ctx)
            if opts.target is not None:
                _await_target(ctx, opts.target)
            else:
                _start_fleet(drill, ctx, opts)
            ctx.supervise()
            ctx.workload.create_recurring(drill.shape())
            time.sleep(drill.warmup_s)
            for i in range(opts.cycles):
                begin = ctx.now_ms()
                drill.cycle(ctx, i)
                ctx.cycles.append((begin, ctx.now_ms()))
                _progress(drill.name, i + 1, opts.cycles, started)
            drill.heal_all(ctx)
            print(f"chaos: {drill.name}: healed; waiting for the fleet to settle, then the "
                  "audit", file=sys.stderr, flush=True)  # fmt: skip
            _settle(ctx)
            ctx.workload.pause_all()
            _wait_quiet(ctx)
            ctx.stop_supervising()
            history = history_read(
                ctx.engine,
                ctx.workload.jobs,
                ctx.ledger_dir,
                ctx.journal_dir or out / "journal",
                ctx.faults,
                ctx.cycles,
                Params(ctx.timings.misfire_grace_ms, ctx.timings.scan_ahead_ms),
                ctx.notes,
            )
        finally:
            ctx.stop_supervising()
            with contextlib.suppress(Exception):
                drill.heal_all(ctx)
            ctx.fleet.stop_all()
            # a task its worker did not stop (a worker dead before its keeper started)
            ledger.kill_leftover_tasks(ctx.ledger_dir)
            drill.teardown(ctx)
            if opts.target is not None:
                with contextlib.suppress(Exception):  # read already, or nothing to read
                    instrument.uninstall(ctx.engine)
            ctx.api.close()
            ctx.engine.dispose()
        result_audit = audit(history)
        ctx.notes.append(_audit_memory(history))
        _write_faults(out, history, result_audit)
    except DrillSetupError as exc:
        error = f"cannot set up the fault: {exc}"
    except Exception as exc:  # a drill that breaks is a failed drill, with its traceback
        error = f"{type(exc).__name__}: {exc}"
        (out / "error.txt").write_text(traceback.format_exc())
    if not opts.keep_db and opts.target is None:
        with contextlib.suppress(Exception):
            stack.database_drop(db_name)
        with contextlib.suppress(Exception):
            stack.kafka_forget(f"{TOPICS}.{tag}.", f"{GROUPS}-{tag}.")
    passed = error is None and result_audit is not None and result_audit.passed
    model = None
    if opts.model:
        from chaos.model import predict

        model = predict(drill, opts, out)
    result = DrillResult(
        drill=drill.name,
        seed=opts.seed,
        cycles=opts.cycles,
        passed=passed,
        error=error,
        audit=result_audit,
        history=history,
        model=model,
        exits=list(ctx.exits) if ctx else [],
        notes=list(ctx.notes) if ctx else [],
        out=out,
        wall_s=time.monotonic() - started,
        command=command,
    )
    from chaos.report import write_report

    write_report(result)
    return result


def _audit_memory(history: History) -> str:
    """What reading and judging the history cost this process at most: a soak's audit
    must fit the machine (a 2-hour soak at 500 runs/s audits 3.6 million runs)."""
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    records = len(history.runs) + len(history.starts) + len(history.writes)
    records += len(history.executions) + len(history.effects)
    per_run = peak_mb * 1024 / max(1, len(history.runs))
    return (
        f"audit: {len(history.runs)} runs ({records} records) read and judged; this "
        f"process's peak resident memory {peak_mb:.0f} MB ({per_run:.1f} KB a run)"
    )


def _write_faults(out: Path, history: History, result: Audit) -> None:
    """What the model needs to be asked about the same fault (chaos.model)."""
    span_ms = max(1, history.end_ms - min((j.created_ms for j in history.jobs), default=0))
    offsets = [
        abs(float(m))
        for f in history.faults
        if f.kind == "clock_skew"
        for m in re.findall(r"([+-][0-9.]+)s", f.target)
    ]
    fires = result.expected + result.expected_poison
    data = {
        "faults": [asdict(f) for f in history.faults],
        "rate_per_s": round(fires / (span_ms / 1000), 2),
        "poison_share": (
            round(result.expected_poison / fires, 3) if result.expected_poison else None
        ),
        "skew_offset_s": round(sum(offsets) / len(offsets), 2) if offsets else None,
    }
    (out / "faults.json").write_text(json.dumps(data, indent=2))


def _context(
    drill: Drill, stack: ChaosStack, opts: RunOptions, out: Path, tag: str, db_name: str
) -> DrillContext:
    from kit.store import migrate
    from kit.store.db import engine_for
    from kit.store.tokens import token_create

    ledger_dir = out / "ledger"
    ledger.prepare(ledger_dir, local_run_as())  # before anything is made for the drill
    stack.kafka_forget(f"{TOPICS}.", f"{GROUPS}-")  # what earlier drills left
    url = stack.database_create(db_name)
    migrate.upgrade(url)
    engine = engine_for(url, pool_size=4)
    instrument.install(engine)
    token = token_create(engine, TENANT, ("read", "write", "command")).token
    policy = out / "tasks.toml"
    policy.write_text(local_policy_toml(TENANT, ["/bin/sh"]))  # as nobody where root
    tenants = out / "tenants.toml"
    tenants.write_text(local_tenants_toml([TENANT]))  # the workload uses every tier
    api_port = free_port()
    env = stack.env() | opts.timings.env()
    env |= {
        "CRONFLEET_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "CRONFLEET_TASK_POLICY_FILE": str(policy),
        "CRONFLEET_TENANT_POLICY_FILE": str(tenants),
        "CRONFLEET_EXECUTION_JOURNAL_DIR": str(out / "journal"),
        "CRONFLEET_API_PORT": str(api_port),
    }
    fleet = DrillFleet(env, url, out / "logs")
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{api_port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    rng = random.Random(f"{opts.seed}:{drill.name}")
    return DrillContext(
        name=drill.name,
        stack=stack,
        fleet=fleet,
        workload=Workload(api, ledger_dir, random.Random(rng.random())),
        api=api,
        engine=engine,
        rng=rng,
        out=out,
        ledger_dir=ledger_dir,
        timings=opts.timings,
        prefix=f"{TOPICS}.{tag}",
        group=f"{GROUPS}-{tag}",
    )


def _target_context(
    drill: Drill, stack: Any, opts: RunOptions, out: Path, tag: str
) -> DrillContext:
    """A deployed fleet (chaos.target): its database (already migrated: the drill makes
    its token there and installs its witness for its length), its API, its brokers; a
    ledger of this drill's own under the target's ledger_dir, which the tasks (the
    fleet's run_as users, too) may write."""
    from chaos.target import TargetFleet
    from kit.store.db import engine_for
    from kit.store.tokens import token_create

    target = opts.target
    engine = engine_for(target.database_url, pool_size=4)
    instrument.install(engine)
    token = token_create(engine, TENANT, ("read", "write", "command")).token
    ledger_dir = target.ledger_dir / f"{drill.name}-{tag}"
    ledger.prepare(ledger_dir)
    for path in (target.ledger_dir, ledger_dir, ledger_dir / "done"):
        path.chmod(0o1777)
    for path in ledger_dir.glob("*.log"):
        path.chmod(0o666)
    api = httpx.Client(
        base_url=target.api_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    rng = random.Random(f"{opts.seed}:{drill.name}")
    return DrillContext(
        name=drill.name,
        stack=stack,
        fleet=TargetFleet(target, out / "logs"),  # type: ignore[arg-type]
        workload=Workload(api, ledger_dir, random.Random(rng.random())),
        api=api,
        engine=engine,
        rng=rng,
        out=out,
        ledger_dir=ledger_dir,
        timings=target.timings,
        prefix=target.topic_prefix,
        group=target.worker_group,
        journal_dir=target.journal_dir,
    )


def _await_target(ctx: DrillContext, target: Any) -> None:
    """The deployed fleet answering: its API, every worker machine present, every
    partition owned."""

    def api_up() -> bool:
        with contextlib.suppress(httpx.TransportError):
            return ctx.api.get("/healthz").status_code == 200
        return False

    wait_for("the target's api", api_up, 90)
    workers = len(target.names("worker"))
    wait_for("the target's workers", lambda: _workers_present(ctx) >= workers, 90)
    ctx.wait_partitions_covered(90)


def _start_fleet(drill: Drill, ctx: DrillContext, opts: RunOptions) -> None:
    common = ["--topic-prefix", ctx.prefix]
    specs: list[ServiceSpec] = [ServiceSpec("api", "api", ["api", *common])]
    for i in range(drill.schedulers):
        name = f"sched-{chr(ord('a') + i)}"
        args = ["scheduler", "--node-id", name, *common]
        specs.append(drill.scheduler_spec(ctx, name, args))
    specs.append(ServiceSpec("reaper", "reaper", ["reaper", *common, "--group-id", ctx.group]))
    for i in range(drill.workers):
        name = f"w{i + 1}"
        args = ["worker", "--worker-id", name, "--concurrency", str(drill.concurrency)]
        args += [*common, "--group-id", ctx.group, "--drain-s", "5"]
        specs.append(drill.worker_spec(ctx, name, args))
    for spec in specs:
        if spec.role in opts.plants:
            spec.module = opts.plants[spec.role]
        ctx.fleet.start(spec)

    def api_up() -> bool:
        _fail_if_dead(ctx)
        with contextlib.suppress(httpx.TransportError):
            return ctx.api.get("/healthz").status_code == 200
        return False

    wait_for("the api", api_up, 90)
    wait_for(
        "the workers' presence",
        lambda: _fail_if_dead(ctx) or _workers_present(ctx) >= drill.workers,
        90,
    )
    ctx.wait_partitions_covered(90)


def _fail_if_dead(ctx: DrillContext) -> bool:
    dead = ctx.fleet.dead_unexpectedly()
    if dead:
        name = dead[0]
        raise RuntimeError(f"{name} exited while starting:\n{ctx.fleet.log_tail(name)}")
    return False


def _workers_present(ctx: DrillContext) -> int:
    with ctx.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM workers")).scalar_one())


def _settle(ctx: DrillContext) -> None:
    """After the last heal, let every service be up and every partition owned again, and
    a few fires happen on a healthy fleet, before the workload stops."""
    for name in list(ctx.down):
        ctx.restart(name)
    ctx.wait_partitions_covered(90)
    time.sleep(ctx.timings.scan_ahead_ms / 1000 + 2)


def _busy(ctx: DrillContext) -> int:
    with ctx.engine.connect() as conn:
        return int(
            conn.execute(
                text(f"SELECT count(*) FROM runs WHERE tenant = :t AND status IN {BUSY}"),
                {"t": TENANT},
            ).scalar_one()
        )


def _wait_quiet(ctx: DrillContext) -> None:
    """Until no run is pending, running or waiting for its retry (or the timeout: what is
    still busy then is reported as unfinished by the auditor)."""
    try:
        wait_for("the fleet to go quiet", lambda: _busy(ctx) == 0, QUIET_TIMEOUT_S, 0.5)
    except TimeoutError as exc:
        ctx.notes.append(f"{exc}: {_busy(ctx)} runs still busy")
        ctx.notes += _why_not_quiet(ctx)
    time.sleep(1.0)  # the journals flush every 0.2 s


def _why_not_quiet(ctx: DrillContext) -> list[str]:
    """What a reader of a failed drill (often only CI's output) needs to find where runs
    got stuck: the partitions the workers' group has not committed to their end, and
    where each worker's poll loop is (its main thread's stack, written to its log by
    SIGUSR1: kit.cli registers faulthandler) and what its consumer holds and has read
    (SIGUSR2: kit.worker.cli)."""
    notes: list[str] = []
    try:
        progress = QueueProgress(ctx.stack.kafka_bootstrap, ctx.group, topic_prefix=ctx.prefix)
        try:
            for tier in progress.tiers:
                high, done = progress.high_watermarks(tier), progress.committed(tier)
                behind = {p: (done.get(p, 0), h) for p, h in high.items() if done.get(p, 0) < h}
                if behind:
                    notes.append(f"group {ctx.group}.{tier} behind (committed, high): {behind}")
        finally:
            progress.close()
    except Exception as exc:  # a diagnosis, never a second failure
        notes.append(f"group progress unknown: {exc}")
    sizes: dict[str, int] = {}
    for name in ctx.fleet.names("worker"):
        log_path = ctx.fleet.log_dir / f"{name}.log"
        with contextlib.suppress(OSError):
            sizes[name] = log_path.stat().st_size
            os.kill(ctx.fleet.pid(name), signal.SIGUSR1)
            os.kill(ctx.fleet.pid(name), signal.SIGUSR2)
    time.sleep(1.5)
    for name, size in sizes.items():
        with contextlib.suppress(OSError), (ctx.fleet.log_dir / f"{name}.log").open("rb") as f:
            f.seek(size)
            dump = f.read().decode(errors="replace")
            frames = main_thread_frames(dump)
            notes.append(f"{name} main thread, innermost first: {' | '.join(frames[:8])}")
            notes += [
                f"{name} {ln.split('consumer state: ', 1)[1]}"
                for ln in dump.splitlines()
                if "consumer state: " in ln
            ][:1]
    return notes


def main_thread_frames(dump: str) -> list[str]:
    """The frames of the thread that took the signal (faulthandler's "Current thread":
    the main thread, a service's loop) in a stack dump, innermost first."""
    if "Current thread" not in dump:
        return []
    block = dump.split("Current thread", 1)[1].split("\n\n", 1)[0]
    return [ln.strip() for ln in block.splitlines() if ln.strip().startswith("File")]
