"""How the fleet is shared between tenants: the operator's limits and weights, decided on
a policy already read.

Tenants are untrusted and share one fleet, so what each may take is the operator's
choice, made in the kit's configuration (a TOML file named by
`CRONFLEET_TENANT_POLICY_FILE`), never through the API. A tenant the file does not name
gets `[defaults]`; with no file every tenant gets `TenantLimits()`, which limits nothing
but the priority tiers (a tenant may not mark its own work `critical`).

    # /etc/cronfleet/tenants.toml
    [defaults]
    weight = 1
    tiers = ["normal", "low"]
    max_jobs = 10000
    api_rate_per_s = 50
    api_burst = 100

    [tenants.acme]
    weight = 4
    class = "paid"
    tiers = ["critical", "high", "normal", "low"]
    max_running = 500

    [tenants.hobby]
    max_preemptions = 1        # its runs are preempted at most once each (default 3)

Every field of a tenant table is optional and falls back to `[defaults]`, then to
`TenantLimits()`. A limit of 0 is a real limit (nothing); an absent one is no limit,
but for `max_preemptions`, which is 3 unless set (0: never preempted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum

from kit.core.dispatch import DEFAULT_TIER, PRIORITY_TIERS
from kit.core.errors import FieldError


class TenantClass(StrEnum):
    """Paid runs take free slots before free ones, and may take a slot back from a
    preemptible (free) run when the fleet is full."""

    paid = "paid"
    free = "free"


# A free run preempted this many times keeps its slot: a bound on the work thrown away.
DEFAULT_MAX_PREEMPTIONS = 3

# The tiers a tenant may use unless the operator says otherwise: all but `critical`,
# which is the operator's to hand out.
DEFAULT_TIERS: tuple[str, ...] = tuple(t for t in PRIORITY_TIERS if t != "critical")


@dataclass(frozen=True)
class TenantLimits:
    """What one tenant may take of the fleet. None: no limit."""

    weight: float = 1.0  # its share of a tier's slots against the others' weights
    tenant_class: TenantClass = TenantClass.free
    tiers: tuple[str, ...] = DEFAULT_TIERS  # priority tiers its jobs may use
    max_jobs: int | None = None  # jobs it may have at once
    max_running: int | None = None  # its runs running at once, fleet-wide
    max_starts_per_s: float | None = None  # its runs started per second, fleet-wide
    max_queued_per_queue: int | None = None  # pending tasks in any one pull queue
    # how many times one of its runs may be preempted for a paid run (kit.core.preemption)
    max_preemptions: int = DEFAULT_MAX_PREEMPTIONS
    api_rate_per_s: float | None = None  # API requests per second (a token bucket) ...
    api_burst: int | None = None  # ... holding this many (default: one second's worth)

    def tier_refusal(self, tier: str) -> str | None:
        """Why this tenant may not use `tier`, or None."""
        if tier in self.tiers:
            return None
        allowed = ", ".join(self.tiers) or "none"
        return f"the operator allows this tenant the priority tiers {allowed}, not {tier!r}"

    @property
    def default_tier(self) -> str:
        """The tier a job that names none gets: the kit's default if allowed, else the
        least urgent one the tenant has."""
        if DEFAULT_TIER in self.tiers or not self.tiers:
            return DEFAULT_TIER
        return self.tiers[-1]

    @property
    def burst(self) -> int | None:
        if self.api_rate_per_s is None:
            return None
        if self.api_burst is not None:
            return self.api_burst
        return max(1, int(self.api_rate_per_s))


UNLIMITED = TenantLimits(tiers=PRIORITY_TIERS)  # the operator's own tools, drills, benches


@dataclass(frozen=True)
class TenantsPolicy:
    defaults: TenantLimits = field(default_factory=TenantLimits)
    tenants: Mapping[str, TenantLimits] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: Mapping[str, object]) -> TenantsPolicy:
        """`{"defaults": {...}, "tenants": {"acme": {...}}}` as read from the operator's
        TOML file. FieldError names the entry (`tenants.acme.weight`)."""
        extra = sorted(set(data) - {"defaults", "tenants"})
        if extra:
            raise FieldError(extra[0], "unknown setting (expected [defaults], [tenants.<name>])")
        defaults = _limits("defaults", data.get("defaults", {}), TenantLimits())
        tenants = data.get("tenants", {})
        if not isinstance(tenants, Mapping):
            raise FieldError("tenants", "must be a table of tenants")
        parsed = {
            str(name): _limits(f"tenants.{name}", entry, defaults)
            for name, entry in tenants.items()
        }
        return cls(defaults, parsed)

    def for_tenant(self, tenant: str) -> TenantLimits:
        return self.tenants.get(tenant, self.defaults)

    def weight(self, tenant: str) -> float:
        return self.for_tenant(tenant).weight


OPEN = TenantsPolicy()  # no file: the tiers are the only limit
FAIL_CLOSED = TenantsPolicy(TenantLimits(weight=1.0, tiers=(), max_jobs=0, max_running=0))

_FIELDS = {
    "weight": "weight",
    "class": "tenant_class",
    "tiers": "tiers",
    "max_jobs": "max_jobs",
    "max_running": "max_running",
    "max_starts_per_s": "max_starts_per_s",
    "max_queued_per_queue": "max_queued_per_queue",
    "max_preemptions": "max_preemptions",
    "api_rate_per_s": "api_rate_per_s",
    "api_burst": "api_burst",
}
assert set(_FIELDS.values()) == {f.name for f in fields(TenantLimits)}


def _limits(where: str, entry: object, base: TenantLimits) -> TenantLimits:
    if not isinstance(entry, Mapping):
        raise FieldError(where, "must be a table")
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        raise FieldError(f"{where}.{unknown[0]}", f"unknown limit (one of {', '.join(_FIELDS)})")
    values: dict[str, object] = {}
    for key, value in entry.items():
        name = f"{where}.{key}"
        if key == "weight":
            values["weight"] = _positive(name, value)
        elif key == "class":
            if value not in {c.value for c in TenantClass}:
                raise FieldError(name, "must be 'paid' or 'free'")
            values["tenant_class"] = TenantClass(value)
        elif key == "tiers":
            values["tiers"] = _tiers(name, value)
        elif key in ("max_starts_per_s", "api_rate_per_s"):
            values[key] = _positive(name, value)
        else:
            values[_FIELDS[key]] = _count(name, value, minimum=1 if key == "api_burst" else 0)
    return replace(base, **values)  # type: ignore[arg-type]


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise FieldError(name, "must be a number greater than 0")
    if value != value or value == float("inf"):
        raise FieldError(name, "must be a finite number")
    return float(value)


def _count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FieldError(name, f"must be a whole number of at least {minimum}")
    return value


def _tiers(name: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise FieldError(name, f"must be a list of tiers ({', '.join(PRIORITY_TIERS)})")
    for index, tier in enumerate(value):
        if tier not in PRIORITY_TIERS:
            raise FieldError(f"{name}[{index}]", f"must be one of {', '.join(PRIORITY_TIERS)}")
    if len(set(value)) != len(value):
        raise FieldError(name, "names a tier twice")
    return tuple(t for t in PRIORITY_TIERS if t in value)  # most urgent first
