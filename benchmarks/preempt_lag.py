"""How late a paid tenant's run starts on a worker full of a free tenant's 30 s runs
(preemption, docs/tenants.md): from its second to its start.

    python benchmarks/preempt_lag.py [--slots 8] [--paid 10] [--free-s 30] [--out DIR]

A real worker (in this process) with `--slots` slots on the local stack, a fresh database
and topics. Tenant `free` fills every slot with `sleep --free-s` commands; then, one at
a time, a run of tenant `paid` (class paid) due now (`true`): it preempts a free run, the
free run is given back and runs again. Before each paid run, every slot runs a free run
again. The lag is the paid run's start (the worker's, on the database's clock) less its
scheduled second. Every value is printed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import threading
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from one_worker import scratch, wait
from sqlalchemy import text

from kit.core.ids import run_id
from kit.core.schedule import parse_schedule
from kit.core.task_policy import TaskPolicy
from kit.core.tenancy import TenantClass, TenantLimits, TenantsPolicy
from kit.core.timeutil import to_epoch_ms
from kit.store.jobs import JobCreate, JobSpec, job_create
from kit.tasks.policy import PolicySource, local_policy_toml
from kit.transport import RunMessage
from kit.worker.worker import Worker, task_executor

POLICY = PolicySource.fixed(
    TaskPolicy.parse(
        tomllib.loads(
            local_policy_toml("free", ["/bin/sh"]) + local_policy_toml("paid", ["/bin/sh"])
        )
    )
)
TENANTS = TenantsPolicy(tenants={"paid": TenantLimits(tenant_class=TenantClass.paid)})
STARTED = "cronfleet_worker_tenant_started_total"
_SEQ = itertools.count()  # run ids are per millisecond: one apart each


def job(engine, tenant: str, script: str) -> str:  # type: ignore[no-untyped-def]
    spec = JobSpec(
        tenant,
        parse_schedule({"every_s": 86_400}, now=datetime.now(UTC)),
        {"type": "command", "argv": ["/bin/sh", "-c", script]},
        {"max_attempts": 1},
        {"kind": "run_once", "deadline_s": 60},
        timeout_s=3600,
    )
    return job_create(engine, JobCreate(tenant, spec)).job.job_id


def due_now(engine, publisher, tenant: str, job_id: str, n: int) -> list[str]:  # type: ignore[no-untyped-def]
    """`n` runs of the job due now, published."""
    messages, ids = [], []
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for _ in range(n):
            at = now + timedelta(milliseconds=next(_SEQ))
            rid = run_id(job_id, at)
            conn.execute(
                text(
                    "INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at, status,"
                    " trigger_kind) VALUES (:r, :j, :t, 1, :at, 'pending', 'manual')"
                ),
                {"r": rid, "j": job_id, "t": tenant, "at": at},
            )
            messages.append(RunMessage(rid, job_id, 1, to_epoch_ms(at), "normal"))
            ids.append(rid)
    publisher.publish(messages)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--paid", type=int, default=10, help="paid runs, one at a time")
    parser.add_argument("--free-s", type=int, default=30, help="each free run's length")
    parser.add_argument("--out", type=Path, default=None, help="write preempt_lag.json")
    args = parser.parse_args()
    with scratch("preempt") as s:
        engine, publisher, consumer = s.engine, s.publisher, s.consumer
        free_job = job(engine, "free", f"exec sleep {args.free_s}")
        paid_job = job(engine, "paid", "exit 0")
        worker = Worker(
            engine, consumer, publisher, "bench-worker", args.slots, s.settings.run_lease_ttl_ms,
            execute=task_executor(POLICY), tenants=lambda: TENANTS,
        )  # fmt: skip
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop, 5.0), daemon=True)
        thread.start()
        due_now(engine, publisher, "free", free_job, args.slots)
        lags_ms: list[float] = []
        for i in range(args.paid):
            # every slot runs a free run: the first ones, or a preempted one started again
            wait(lambda n=args.slots + i: worker.metrics.value(STARTED, tenant="free") >= n)
            wait(lambda n=i: worker.metrics.value(STARTED, tenant="paid") == n)
            (rid,) = due_now(engine, publisher, "paid", paid_job, 1)
            wait(lambda r=rid: _status(engine, r) == "succeeded")
            with engine.connect() as conn:
                lag = conn.execute(
                    text(
                        "SELECT extract(epoch FROM started_at - scheduled_at) * 1000"
                        " FROM runs WHERE run_id = :r"
                    ),
                    {"r": rid},
                ).scalar_one()
            lags_ms.append(float(lag))
        preempted = worker.metrics.value("cronfleet_tenant_preempted_total", tenant="free")
        with engine.connect() as conn:
            attempts = conn.execute(
                text("SELECT max(attempt) FROM runs WHERE tenant = 'free'")
            ).scalar_one()
        v = sorted(lags_ms)
        print(
            f"{args.slots} slots full of {args.free_s} s free runs; {args.paid} paid runs due "
            "now, one at a time; ms from the paid run's second to its start:"
        )
        print("  " + ", ".join(f"{x:.0f}" for x in v))
        print(f"  p50 {statistics.median(v):.0f} ms, max {v[-1]:.0f} ms")
        print(f"  free runs preempted: {preempted:.0f}; highest free attempt: {attempts}")
        print(
            f"command: python benchmarks/preempt_lag.py --slots {args.slots} --paid {args.paid}"
            f" --free-s {args.free_s}"
        )
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            data = {"lags_ms": lags_ms, "preempted": preempted, "max_free_attempt": attempts}
            (args.out / "preempt_lag.json").write_text(json.dumps(data, indent=1))
        stop.set()
        thread.join(timeout=30)


def _status(engine, rid: str) -> str:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return str(
            conn.execute(text("SELECT status FROM runs WHERE run_id = :r"), {"r": rid}).scalar_one()
        )


if __name__ == "__main__":
    main()
