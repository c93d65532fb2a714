"""What explain says of a run due and not started at its tenant's limits
(kit.core.waiting.limit_note)."""

from __future__ import annotations

from kit.core.tenancy import FAIL_CLOSED, TenantLimits
from kit.core.waiting import TenantLoad, limit_note, limited


def test_at_max_running_names_the_limit_and_the_counts() -> None:
    limits = TenantLimits(max_running=2)
    assert limit_note("acme", limits, TenantLoad(2, 0)) == (
        "waiting: tenant acme at max_running (2 of 2 running)"
    )
    # a fleet of more workers than the limit may run a little over it
    assert limit_note("acme", limits, TenantLoad(3, 0)) == (
        "waiting: tenant acme at max_running (3 of 2 running)"
    )
    assert limit_note("acme", limits, TenantLoad(1, 1)) is None


def test_a_policy_failed_closed_holds_every_run() -> None:
    limits = FAIL_CLOSED.for_tenant("acme")
    assert limit_note("acme", limits, TenantLoad(0, 0)) == (
        "waiting: tenant acme at max_running (0 of 0 running)"
    )


def test_at_max_starts_per_s_counts_the_starts_of_the_window() -> None:
    limits = TenantLimits(max_starts_per_s=0.5)
    # 0.5 a second over 10 s: 5 starts
    assert limit_note("acme", limits, TenantLoad(9, 4), window_ms=10_000) is None
    assert limit_note("acme", limits, TenantLoad(9, 5), window_ms=10_000) == (
        "waiting: tenant acme at max_starts_per_s (5 of its runs running started in the "
        "last 10 s; its limit is 0.5 per second)"
    )
    # a rate below one start per window still allows one
    slow = TenantLimits(max_starts_per_s=0.01)
    assert limit_note("acme", slow, TenantLoad(1, 0), window_ms=10_000) is None
    assert limit_note("acme", slow, TenantLoad(1, 1), window_ms=10_000) is not None


def test_max_running_is_named_before_the_rate() -> None:
    limits = TenantLimits(max_running=1, max_starts_per_s=1)
    got = limit_note("acme", limits, TenantLoad(1, 10), window_ms=10_000)
    assert got is not None and "max_running" in got


def test_no_limit_says_nothing_and_reads_nothing() -> None:
    assert not limited(TenantLimits())
    assert limited(TenantLimits(max_running=0)) and limited(TenantLimits(max_starts_per_s=1))
    assert limit_note("acme", TenantLimits(), TenantLoad(1000, 1000)) is None
