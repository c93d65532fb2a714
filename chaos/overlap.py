"""Two verdicts of the auditor (chaos.audit) on executions rather than on rows; pure, from
the history alone.

- A run started twice in the cycle of a fault that leases outlive (a stall shorter than
  one run lease less one beat, `FaultWindow.once`): the worker gave a healthy run back.
  Every run held through such a stall keeps its lease in the database, so nothing is
  ever handed to a second worker, and no second start is allowed at all (not only no
  second effect).
- Overlapping executions: an execution of a run that still acted (made its effect, or
  found it made) after a later attempt of the same run had started. A worker stops its
  task before its lease ends and the reaper hands the run on only after it ended, so
  two executions of one run never overlap; one that did acted on a run another worker
  had taken (a frozen worker's task running on, a fence that did not fire). The tasks'
  ledger times are the host's clock, like the start they are compared with.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from chaos.ledger import LedgerLine
from chaos.records import FaultWindow, Start


@dataclass(frozen=True)
class ExecFinding:
    run_id: str
    at_ms: int
    why: str


def second_starts_in_once_faults(
    starts: Iterable[Start],
    faults: Sequence[FaultWindow],
    cycles: Sequence[tuple[int, int]],
) -> list[ExecFinding]:
    """Starts beyond a run's first that fall in the cycle of a `once` fault."""
    spans = [
        (cycles[f.cycle], f)
        for f in faults
        if f.once and 0 <= f.cycle < len(cycles)
    ]  # fmt: skip
    if not spans:
        return []
    by_run: dict[str, list[Start]] = defaultdict(list)
    for s in starts:
        by_run[s.run_id].append(s)
    out: list[ExecFinding] = []
    for run_id, runs in by_run.items():
        ordered = sorted(runs, key=lambda s: s.at_ms)
        for again in ordered[1:]:
            for (begin, end), fault in spans:
                if begin <= again.at_ms < end:
                    stall = fault.heal_ms - fault.start_ms
                    out.append(
                        ExecFinding(
                            run_id,
                            again.at_ms,
                            f"started again (attempt {again.attempt}, {again.worker}) in cycle "
                            f"{fault.cycle}, whose {fault.kind} of {stall} ms the leases outlive",
                        )
                    )
                    break
    return out


def overlapping_executions(
    executions: Iterable[LedgerLine], effects: Iterable[LedgerLine], keys: Collection[str]
) -> list[ExecFinding]:
    """Executions (one per attempt of a run, among `keys`) that made or found their effect
    after a later attempt of the same run had started."""
    first_start: dict[tuple[str, int], int] = {}
    acts: dict[tuple[str, int], list[LedgerLine]] = defaultdict(list)
    for line in (*executions, *effects):
        if line.key not in keys:
            continue
        at = (line.key, line.attempt)
        if line.event == "start":
            first_start[at] = min(first_start.get(at, line.at_ms), line.at_ms)
        elif line.event in ("effect", "dedup"):
            acts[at].append(line)
    attempts: dict[str, list[tuple[int, int]]] = defaultdict(list)  # key -> (start, attempt)
    for (key, attempt), start in first_start.items():
        attempts[key].append((start, attempt))
    out: list[ExecFinding] = []
    for key, started in attempts.items():
        started.sort()
        for i, (_, attempt) in enumerate(started):
            later = [(s, a) for s, a in started[i + 1 :] if a != attempt]
            if not later:
                continue
            taken_ms, taken_by = later[0]
            for line in acts.get((key, attempt), ()):
                if line.at_ms > taken_ms:
                    out.append(
                        ExecFinding(
                            key,
                            line.at_ms,
                            f"attempt {attempt} wrote '{line.event}' {line.at_ms - taken_ms} ms "
                            f"after attempt {taken_by} had started",
                        )
                    )
                    break
    return out
