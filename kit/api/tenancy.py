"""The operator's tenant policy at the API: the tiers a tenant may use, its most jobs,
its most queued tasks per queue, and its API requests per second (a token bucket per
tenant, in this process).

What a tenant meets at a limit (docs/tenants.md):
- a priority tier it may not use: 403, field `priority`, nothing written;
- `max_jobs`: 403 (a quota, not a rate: waiting does not help, deleting jobs or the
  operator raising it does), code and field `max_jobs`, naming its count and the
  limit; a batch that would cross it writes nothing;
- `max_queued_per_queue`: 429 with Retry-After, field `max_queued_per_queue`;
- `api_rate_per_s` / `api_burst`: 429 with Retry-After (whole seconds, at least 1).
The operator's own tokens (kit.api.fleet.is_operator's rule) are never rate-limited.
Each refusal is counted per tenant on /metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import Request
from prometheus_client import Counter
from starlette.types import ASGIApp, Receive, Scope, Send

from kit.api.errors import ApiError, error_response
from kit.core.rate import Bucket, take
from kit.core.tenancy import TenantLimits, TenantsPolicy
from kit.settings import Settings
from kit.store.errors import JobLimitReached, QueueFull, TierNotAllowed
from kit.store.tokens import TokenInfo

REFUSED = Counter(
    "cronfleet_api_tenant_refused_total",
    "API requests refused by the operator's tenant limits, per tenant and limit "
    "(api_rate, max_jobs, max_queued_per_queue, tiers).",
    ["tenant", "reason"],
)
JOBS_REFUSED = Counter(
    "cronfleet_api_tenant_jobs_refused_total",
    "Jobs not created because their tenant was at max_jobs (a batch counts each job).",
    ["tenant"],
)
RETRY_QUEUE_FULL_S = 5  # a full queue drains as its consumers lease and ack


def tenants_of(request: Request) -> TenantsPolicy:
    return request.app.state.tenants.current()


def limits_of(request: Request, tenant: str) -> TenantLimits:
    return tenants_of(request).for_tenant(tenant)


def is_operator_token(settings: Settings, token: TokenInfo | None) -> bool:
    """A token of the operator's tenant with the `admin` scope (the fleet view's rule)."""
    tenant = settings.operator_tenant
    return bool(tenant) and token is not None and token.tenant == tenant and token.allows("admin")


def tier_refused(tenant: str, reason: str, field: str = "priority") -> ApiError:
    REFUSED.labels(tenant, "tiers").inc()
    return ApiError(403, f"{field}: {reason}", [(field, reason)])


def check_tier(request: Request, tenant: str, tier: str, field: str = "priority") -> None:
    """403 naming `field` if the operator does not allow `tenant` this tier."""
    reason = limits_of(request, tenant).tier_refusal(tier)
    if reason is not None:
        raise tier_refused(tenant, reason, field)


def job_limit_refused(tenant: str, exc: JobLimitReached) -> ApiError:
    REFUSED.labels(tenant, "max_jobs").inc()
    JOBS_REFUSED.labels(tenant).inc(exc.adding)
    reason = (
        f"the tenant has {exc.count} jobs and the operator's limit is {exc.limit}: "
        f"{exc.adding} more would pass it; nothing was written"
    )
    return ApiError(403, f"max_jobs: {reason}", [("max_jobs", reason)], code="max_jobs")


def queue_full_refused(tenant: str, exc: QueueFull) -> ApiError:
    REFUSED.labels(tenant, "max_queued_per_queue").inc()
    reason = (
        f"the queue holds {exc.count} unfinished tasks and the operator's limit is "
        f"{exc.limit}: {exc.adding} more would pass it; nothing was written"
    )
    return ApiError(
        429,
        f"max_queued_per_queue: {reason}",
        [("max_queued_per_queue", reason)],
        code="max_queued_per_queue",
        headers={"Retry-After": str(RETRY_QUEUE_FULL_S)},
    )


class TenantBuckets:
    """Each tenant's token bucket in this process (kit.core.rate decides). One event
    loop reads and writes it: no lock. `clock` is monotonic seconds."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, max_tenants: int = 100_000
    ) -> None:
        self.clock = clock
        self.max_tenants = max_tenants
        self._buckets: dict[str, Bucket] = {}

    def refusal(self, tenant: str, limits: TenantLimits) -> ApiError | None:
        """None if `tenant` may make one more request now; else the 429 to answer."""
        rate, burst = limits.api_rate_per_s, limits.burst
        if rate is None or burst is None:
            return None
        if len(self._buckets) >= self.max_tenants and tenant not in self._buckets:
            self._buckets.clear()  # rare: every bucket starts full again
        taken = take(self._buckets.get(tenant), rate, burst, self.clock())
        self._buckets[tenant] = taken.bucket
        if taken.allowed:
            return None
        REFUSED.labels(tenant, "api_rate").inc()
        reason = (
            f"the tenant's requests pass the operator's limit of {rate:g} per second "
            f"(burst {burst}) in this API process; retry after {taken.retry_after_s} s"
        )
        return ApiError(
            429,
            f"api_rate_per_s: {reason}",
            [("api_rate_per_s", reason)],
            code="rate_limited",
            headers={"Retry-After": str(taken.retry_after_s)},
        )


def rate_refusal(app_state: object, token: TokenInfo) -> ApiError | None:
    """The 429 for one more request of this token's tenant, or None (the operator's
    tokens: always None)."""
    settings: Settings = app_state.settings  # type: ignore[attr-defined]
    if is_operator_token(settings, token):
        return None
    limits = app_state.tenants.current().for_tenant(token.tenant)  # type: ignore[attr-defined]
    buckets: TenantBuckets = app_state.tenant_buckets  # type: ignore[attr-defined]
    return buckets.refusal(token.tenant, limits)


class TenantRateLimit:
    """ASGI middleware inside BearerAuth: a /v1 request of an authenticated tenant over
    its rate is answered 429 before the route reads anything."""

    def __init__(self, app: ASGIApp, state: Callable[[], object]) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = scope.get("state", {}).get("principal") if scope["type"] == "http" else None
        if principal is not None:
            refusal = rate_refusal(self.state(), principal)
            if refusal is not None:
                await error_response(refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def tier_not_allowed(request: Request, tenant: str, exc: TierNotAllowed) -> ApiError:
    reason = limits_of(request, tenant).tier_refusal(exc.tier) or f"tier {exc.tier!r} refused"
    return tier_refused(tenant, reason)
