"""Drill 14: the database's disk fills. The drill's database lives on a small filesystem
of its own (chaos.smallfs: a tmpfs made a tablespace; the WAL stays on the data
directory's disk); a cycle fills it to the last byte for 3-10 s, then frees it.

While it is full, a client creates one-off jobs through the API and retries what is
refused: every refusal must be a 503 that says the database is out of disk space (a 5xx
that does not, or a 500, fails the drill); the services must say why they cannot write
and keep trying; nothing is lost (every job the API accepted runs, every fire of the
workload takes effect) and everything resumes once space returns."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from chaos import nemesis
from chaos.drill import Drill, DrillContext, DrillSetupError
from chaos.ledger import task_spec
from chaos.smallfs import SmallFs, SmallFsError
from chaos.workload import HEALTHY_RETRY, CreatedJob, Shape, standard_classes

CREATED_DURING = 6  # one-off jobs a client creates while the disk is full, per cycle
RETRY_FOR_S = 60.0  # how long the client keeps retrying a refused create


class DiskFull(Drill):
    number = 14
    name = "disk-full"
    title = "the database's disk full (a small tablespace of its own), then freed"
    summary = (
        "fill the tmpfs under the drill's tablespace to the last byte for 3-10 s while a "
        "client creates jobs through the API (refusals must say why), then free it"
    )

    def shape(self) -> Shape:
        return Shape(standard_classes(), burst=0)

    def setup(self, ctx: DrillContext) -> None:
        small = SmallFs(ctx.stack, ctx.prefix.rsplit(".", 1)[1])
        ctx.state["smallfs"] = small  # torn down, whatever of it was made
        ctx.state["refusals"] = Counter()
        try:
            small.create(ctx.engine)
        except SmallFsError as exc:
            raise DrillSetupError(str(exc)) from None

    def cycle(self, ctx: DrillContext, index: int) -> None:
        rng = ctx.rng
        small: SmallFs = ctx.state["smallfs"]
        hold_s = rng.uniform(3.0, 10.0)
        due = datetime.now(UTC) + timedelta(seconds=hold_s + 8.0)
        with ctx.fault("disk_full", f"tablespace full {hold_s:.1f}s", index):
            filled = small.fill()
            healed_at = time.monotonic() + hold_s
            unclear = create_through_refusals(ctx, index, due, healed_at, small)
            if time.monotonic() < healed_at:
                time.sleep(healed_at - time.monotonic())
            small.empty()
        said = services_saying(ctx, "No space left on device")
        ctx.notes.append(
            f"cycle {index}: filled {filled // (1 << 20)} MiB for {hold_s:.1f} s; API "
            f"refusals so far {dict(ctx.state['refusals'])}; services that said why: "
            f"{', '.join(said) or 'none'}"
        )
        if unclear:
            raise RuntimeError(f"the API refused writes without saying why: {unclear[:3]}")
        nemesis.recover(ctx, 4.0)

    def heal_all(self, ctx: DrillContext) -> None:
        small: SmallFs | None = ctx.state.get("smallfs")
        if small is not None:
            small.empty()

    def teardown(self, ctx: DrillContext) -> None:
        small: SmallFs | None = ctx.state.get("smallfs")
        if small is not None:
            ctx.notes += [f"disk-full teardown: {p}" for p in small.destroy(ctx.engine)]

    def model_faults(self, peak_s: float, measured: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {"kind": "db_stall", "at_s": peak_s - 0.5,
             "duration_s": measured.get("disk_full", 6.0)},
        ]  # fmt: skip


def create_through_refusals(
    ctx: DrillContext, cycle: int, due: datetime, healed_at: float, small: SmallFs
) -> list[str]:
    """Create CREATED_DURING one-off jobs due at `due`, each retried (same
    Idempotency-Key) while refused, as a careful client would; heals the disk at
    `healed_at` if still retrying then. Returns the refusals that did not say why."""
    unclear: list[str] = []
    refusals: Counter[str] = ctx.state["refusals"]
    at_iso = due.isoformat()
    for i in range(CREATED_DURING):
        name = f"key-full{cycle}-{i}"
        body = {
            "name": name,
            "schedule": {"at": at_iso},
            "task": task_spec(ctx.ledger_dir, "key"),
            "retry": HEALTHY_RETRY,
            "timeout_s": 30,
            "priority": "normal",
        }
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            if time.monotonic() >= healed_at:
                small.empty()
            try:
                answer = ctx.api.post("/v1/jobs", json=body, headers=headers)
            except httpx.TransportError as exc:
                refusals[f"transport {type(exc).__name__}"] += 1
                time.sleep(0.5)
                continue
            if answer.status_code == 201:
                job_id = answer.json()["job_id"]
                ctx.workload.jobs[job_id] = CreatedJob(
                    job_id, name, "key", "oneoff", {"at": at_iso}, "run_once",
                    int(HEALTHY_RETRY["max_attempts"]), ctx.now_ms(),
                )  # fmt: skip
                break
            code = _code(answer)
            refusals[f"{answer.status_code} {code}"] += 1
            if answer.status_code != 503 or code not in ("database_full", "unavailable"):
                unclear.append(f"{answer.status_code} {answer.text[:200]}")
                break
            if code == "unavailable" and small.free_bytes() == 0:
                unclear.append(f"503 'unavailable' while only the disk was full: {answer.text}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"creating {name}: still refused after {RETRY_FOR_S} s")
            time.sleep(float(answer.headers.get("Retry-After", "1")))
    return unclear


def _code(answer: httpx.Response) -> str:
    try:
        return str(answer.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "?"


def services_saying(ctx: DrillContext, words: str) -> list[str]:
    """The services whose log says `words` (why they could not write)."""
    said = []
    for name in ctx.fleet.names():
        path = ctx.fleet.log_dir / f"{name}.log"
        try:
            if words in path.read_text(errors="replace"):
                said.append(name)
        except OSError:
            continue
    return said
