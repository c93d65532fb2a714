"""Prometheus metrics of the API: requests by route template and status, and latency.

Served at `/metrics` without a token, like every service's metrics port: scrape it
from inside the deployment's network, never expose it publicly. Labels use the route
template (`/v1/jobs/{job_id}`), not the raw path, so ids cannot blow up cardinality;
a request refused before routing (401, 403, 413 by the middlewares) is `unmatched`.

The operator's tenant limits add their refusals per tenant (kit.api.tenancy:
`cronfleet_api_tenant_refused_total{tenant,reason}`, `..._jobs_refused_total{tenant}`),
and each kill switch that is off its held runs (`cronfleet_switch_held_runs{kind,value}`).
"""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from kit.store.switches import switches_list

REQUESTS = Counter(
    "cronfleet_api_requests_total", "HTTP requests answered.", ["method", "route", "status"]
)
LATENCY = Histogram(
    "cronfleet_api_request_duration_seconds",
    "Time to answer an HTTP request.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)


def route_of(scope: Scope) -> str:
    """The matched route's template; the router records it in the scope as it matches."""
    route = scope.get("route")
    # path_format: `{job_id}`, without the path convertor (`{job_id:id}`, kit.api.ids)
    return getattr(route, "path_format", None) or getattr(route, "path", None) or "unmatched"


class RequestMetrics:
    """ASGI middleware: counts and times every HTTP request, including refused ones."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_record(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            route = route_of(scope)
            REQUESTS.labels(scope["method"], route, str(status)).inc()
            LATENCY.labels(scope["method"], route).observe(time.perf_counter() - started)


SWITCH_HELD = Gauge(
    "cronfleet_switch_held_runs",
    "Runs due and not started because an operator's kill switch is off (per switch), "
    "read from the database at each scrape.",
    ["kind", "value"],
)


def _held_runs(engine: Engine) -> None:
    """Each switch that is off, with the runs it holds now; a switch lifted leaves the
    gauge. The database unreachable: the gauge keeps its last values."""
    try:
        states = switches_list(engine)
    except OperationalError:
        return
    SWITCH_HELD.clear()
    for state in states:
        SWITCH_HELD.labels(state.kind, state.value).set(state.held)


async def metrics_endpoint(request: Request) -> Response:
    await run_in_threadpool(_held_runs, request.app.state.engine)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
