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
