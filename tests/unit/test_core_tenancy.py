"""The operator's tenant policy: what a file says, what a tenant gets, and every mistake
named by its entry."""

from __future__ import annotations

import pytest

from kit.core.errors import FieldError
from kit.core.tenancy import OPEN, TenantClass, TenantLimits, TenantsPolicy


def test_a_tenant_falls_back_to_the_defaults_then_to_the_kits() -> None:
    policy = TenantsPolicy.parse(
        {
            "defaults": {"weight": 2, "max_jobs": 10, "api_rate_per_s": 5},
            "tenants": {"acme": {"weight": 4, "class": "paid", "tiers": ["low", "critical"]}},
        }
    )
    acme = policy.for_tenant("acme")
    assert (acme.weight, acme.tenant_class, acme.max_jobs) == (4.0, TenantClass.paid, 10)
    assert acme.tiers == ("critical", "low")  # most urgent first, whatever the file's order
    other = policy.for_tenant("initech")
    assert (other.weight, other.max_jobs, other.burst) == (2.0, 10, 5)
    assert other.tier_refusal("critical") is not None and other.tier_refusal("normal") is None
    assert OPEN.for_tenant("x") == TenantLimits()


def test_a_tenant_without_normal_gets_its_least_urgent_tier() -> None:
    limits = TenantsPolicy.parse({"defaults": {"tiers": ["high", "low"]}}).for_tenant("a")
    assert limits.default_tier == "low"
    assert TenantLimits().default_tier == "normal"


def test_critical_is_the_operators_to_hand_out() -> None:
    why = TenantLimits().tier_refusal("critical")
    assert why is not None and "'critical'" in why


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"tenants": {"a": {"weight": -1}}}, "tenants.a.weight"),
        ({"tenants": {"a": {"weight": 0}}}, "tenants.a.weight"),
        ({"tenants": {"a": {"weight": True}}}, "tenants.a.weight"),
        ({"tenants": {"a": {"weight": float("nan")}}}, "tenants.a.weight"),
        ({"tenants": {"a": {"class": "gold"}}}, "tenants.a.class"),
        ({"tenants": {"a": {"tiers": ["urgent"]}}}, "tenants.a.tiers[0]"),
        ({"tenants": {"a": {"tiers": ["low", "low"]}}}, "tenants.a.tiers"),
        ({"tenants": {"a": {"max_jobs": -1}}}, "tenants.a.max_jobs"),
        ({"tenants": {"a": {"max_jobs": 1.5}}}, "tenants.a.max_jobs"),
        ({"tenants": {"a": {"api_burst": 0}}}, "tenants.a.api_burst"),
        ({"tenants": {"a": {"max_starts_per_s": 0}}}, "tenants.a.max_starts_per_s"),
        ({"tenants": {"a": {"wieght": 1}}}, "tenants.a.wieght"),
        ({"tenants": {"a": 3}}, "tenants.a"),
        ({"tenants": []}, "tenants"),
        ({"defaults": {"max_running": "ten"}}, "defaults.max_running"),
        ({"tenants": {"a": {"max_preemptions": -1}}}, "tenants.a.max_preemptions"),
        ({"defaults": {"max_preemptions": 2.5}}, "defaults.max_preemptions"),
        ({"limits": {}}, "limits"),
    ],
)
def test_each_mistake_is_named_by_its_entry(data: dict[str, object], field: str) -> None:
    with pytest.raises(FieldError) as caught:
        TenantsPolicy.parse(data)
    assert caught.value.field == field


def test_a_limit_of_zero_is_a_limit() -> None:
    limits = TenantsPolicy.parse({"defaults": {"max_running": 0}}).for_tenant("a")
    assert limits.max_running == 0


def test_a_run_may_be_preempted_three_times_unless_the_operator_says_otherwise() -> None:
    assert TenantLimits().max_preemptions == 3
    policy = TenantsPolicy.parse(
        {"defaults": {"max_preemptions": 1}, "tenants": {"a": {"max_preemptions": 0}}}
    )
    assert policy.for_tenant("a").max_preemptions == 0  # never preempted
    assert policy.for_tenant("b").max_preemptions == 1


TIERS = "critical, high, normal, low"
LIMITS = (
    "weight, class, tiers, max_jobs, max_running, max_starts_per_s, max_queued_per_queue, "
    "max_preemptions, api_rate_per_s, api_burst"
)


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ({"tenants": {"a": 3}}, "tenants.a", "must be a table"),
        ({"tenants": {"a": {"wieght": 1}}}, "tenants.a.wieght", f"unknown limit (one of {LIMITS})"),
        ({"tenants": {"a": {"class": "gold"}}}, "tenants.a.class", "must be 'paid' or 'free'"),
        ({"defaults": {"weight": float("inf")}}, "defaults.weight", "must be a finite number"),
        (
            {"defaults": {"weight": float("nan")}},
            "defaults.weight",
            "must be a number greater than 0",
        ),
        ({"defaults": {"tiers": "low"}}, "defaults.tiers", f"must be a list of tiers ({TIERS})"),
        (
            {"defaults": {"tiers": ["low", 1]}},
            "defaults.tiers",
            f"must be a list of tiers ({TIERS})",
        ),
        ({"defaults": {"tiers": ["urgent"]}}, "defaults.tiers[0]", f"must be one of {TIERS}"),
        ({"defaults": {"tiers": ["low", "low"]}}, "defaults.tiers", "names a tier twice"),
        (
            {"defaults": {"api_burst": 0}},
            "defaults.api_burst",
            "must be a whole number of at least 1",
        ),
        (
            {"limits": {}},
            "limits",
            "unknown setting (expected [defaults], [tenants.<name>])",
        ),
        ({"tenants": ["a"]}, "tenants", "must be a table of tenants"),
    ],
)
def test_each_mistake_says_what_is_wrong(data: dict[str, object], field: str, reason: str) -> None:
    """The one line the service stops with names the entry and the reason, word for word."""
    with pytest.raises(FieldError) as caught:
        TenantsPolicy.parse(data)
    assert (caught.value.field, caught.value.reason) == (field, reason)


def test_the_smallest_values_each_limit_takes() -> None:
    policy = TenantsPolicy.parse(
        {"tenants": {"a": {"weight": 0.5, "api_rate_per_s": 0.5, "api_burst": 1}}}
    )
    a = policy.for_tenant("a")
    assert (a.weight, a.api_rate_per_s, a.api_burst) == (0.5, 0.5, 1)
    assert policy.weight("a") == 0.5 and policy.weight("b") == 1.0
    assert TenantsPolicy.parse({"defaults": {"api_rate_per_s": 0.5}}).for_tenant("b").burst == 1


def test_a_tier_refused_says_which_tiers_the_tenant_has() -> None:
    assert TenantLimits(tiers=("high", "low")).tier_refusal("critical") == (
        "the operator allows this tenant the priority tiers high, low, not 'critical'"
    )
    assert TenantLimits(tiers=()).tier_refusal("low") == (
        "the operator allows this tenant the priority tiers none, not 'low'"
    )
