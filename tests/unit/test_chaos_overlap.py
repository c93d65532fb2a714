"""The auditor's verdicts on executions (chaos.overlap): a run started twice in the cycle
of a stall its leases outlive, and two executions of one run that overlapped."""

from __future__ import annotations

from chaos.ledger import LedgerLine
from chaos.overlap import overlapping_executions, second_starts_in_once_faults
from chaos.records import FaultWindow, Start


def line(event: str, attempt: int, at_ms: int, key: str = "r1") -> LedgerLine:
    return LedgerLine(event, key, attempt, at_ms, 100)


def test_an_execution_acting_after_the_next_attempt_started_overlapped() -> None:
    starts = [line("start", 1, 0), line("start", 2, 5_000)]
    late = overlapping_executions(starts, [line("effect", 1, 6_000)], {"r1"})
    assert [f.why for f in late] == ["attempt 1 wrote 'effect' 1000 ms after attempt 2 had started"]
    # the same effect before the next attempt began: one after the other, fine
    assert overlapping_executions(starts, [line("effect", 1, 4_000)], {"r1"}) == []
    # a key the auditor does not judge (a poison task's), and a lone attempt
    assert overlapping_executions(starts, [line("effect", 1, 6_000)], {"r2"}) == []
    assert overlapping_executions(starts[:1], [line("effect", 1, 6_000)], {"r1"}) == []


def test_a_dedup_after_the_next_attempt_started_is_an_overlap_too() -> None:
    starts = [line("start", 1, 0), line("start", 2, 5_000), line("dedup", 1, 5_500)]
    assert len(overlapping_executions(starts, [line("effect", 2, 5_200)], {"r1"})) == 1


def test_a_second_start_in_the_cycle_of_a_stall_the_leases_outlive_is_refused() -> None:
    cycles = [(0, 10_000), (10_000, 20_000)]
    short = FaultWindow("postgres_stall", "postgres", 0, 1_000, 3_000, once=True)
    long = FaultWindow("postgres_stall", "postgres", 1, 11_000, 19_000)
    starts = [
        Start("a", 1, 500, "w1"),
        Start("a", 2, 4_000, "w2"),  # again in cycle 0: refused
        Start("b", 1, 10_500, "w1"),
        Start("b", 2, 15_000, "w2"),  # again in cycle 1, a stall longer than a lease
    ]
    found = second_starts_in_once_faults(starts, [short, long], cycles)
    assert [(f.run_id, f.at_ms) for f in found] == [("a", 4_000)]
    assert "postgres_stall of 2000 ms" in found[0].why
