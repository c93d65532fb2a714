"""The jobs API application: `create_app(settings)` builds it; nothing runs at import."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, text
from starlette.concurrency import run_in_threadpool

from kit.api import errors
from kit.api.auth import BearerAuth, TokenCache
from kit.api.backfill import router as backfill_router
from kit.api.compute import limiter as cpu_limiter
from kit.api.console import install as install_console
from kit.api.dead_letters import router as dead_letters_router
from kit.api.docs_ui import install as install_docs
from kit.api.fleet import router as fleet_router
from kit.api.job_history import router as job_history_router
from kit.api.jobs_list import router as jobs_list_router
from kit.api.limits import BodyLimit
from kit.api.metrics import RequestMetrics, metrics_endpoint
from kit.api.models import ErrorOut
from kit.api.openapi import declare_body_rules
from kit.api.queue_admin import router as queue_admin_router
from kit.api.queues import router as queues_router
from kit.api.routes import router
from kit.api.run_cancel import router as run_cancel_router
from kit.api.run_detail import router as run_detail_router
from kit.api.safe_log import UnhandledErrors
from kit.api.schedule_preview import router as schedule_preview_router
from kit.api.switches import router as switches_router
from kit.api.tenancy import TenantBuckets, TenantRateLimit
from kit.settings import Settings, load_settings
from kit.store.db import async_engine_for, engine_for
from kit.store.pg_async import AsyncPool, conninfo_of
from kit.tasks.policy import policy_source
from kit.tasks.tenant_policy import tenant_policy_source

_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description}
    for status, description in (
        (400, "the body is not parseable JSON"),
        (401, "no, malformed, unknown or revoked bearer token"),
        (
            403,
            "the token lacks the scope, or the operator's policy refuses it: the task "
            "(task policy), the priority tier or the tenant's max_jobs (tenant policy)",
        ),
        (404, "no such object for this tenant"),
        (409, "conflict (name taken, Idempotency-Key reused with another body)"),
        (413, "request body too large"),
        (422, "invalid input; `fields` names each problem"),
        (
            429,
            "over the operator's limit of the tenant's API requests per second "
            "(`rate_limited`) or of a queue's unfinished tasks (`max_queued_per_queue`): "
            "retry after Retry-After",
        ),
        (
            503,
            "the database is unavailable (crashed, restarting), or refuses for lack of a "
            "resource (code `database_full`: its disk is full, writes refused): retry after "
            "Retry-After",
        ),
    )
}


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    settings = settings or load_settings()
    task_policy = policy_source(settings.task_policy_file, settings.http_allow_hosts)
    tenants = tenant_policy_source(settings.tenant_policy_file)  # a bad file stops here
    owned_engine = engine is None
    engine = engine or engine_for(settings.database_url, pool_size=settings.api_db_pool_size)
    # Run-now, a run's read and token checks run their store calls on the event loop
    # through this engine (same database, same options); the others are sync handlers
    # on `engine` in the thread pool.
    async_engine = async_engine_for(engine.url, pool_size=settings.api_db_pool_size)
    # The hottest routes (the queue's, the jobs CRUD, a job's runs) skip SQLAlchemy:
    # psycopg's async connections (kit.store.pg_async; the same statements as the sync
    # store functions).
    db_pool = AsyncPool(conninfo_of(engine.url), size=settings.api_db_pool_size)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # as many handler threads as database connections: more threads would only
        # queue on the pool while contending for the GIL
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_db_pool_size
        # What startup built (modules, the app, its models: hundreds of thousands of
        # objects) lives as long as the process: out of the cyclic collector's sight, a
        # full collection walks only what requests made, instead of stopping every
        # request in flight for ~0.1 s
        gc.collect()
        gc.freeze()
        yield
        if sampler := getattr(app.state, "lag_sampler", None):  # kit.api.fleet's
            sampler.close()
        await db_pool.close()
        await async_engine.dispose()
        if owned_engine:
            engine.dispose()

    app = FastAPI(
        title="cronfleet jobs API",
        version="1",
        description=(
            "Schedule jobs (cron with a time zone, fixed interval, one-off), edit, pause, "
            "run now, and read run history. Every /v1 route needs `Authorization: Bearer "
            "<token>` (`cronfleet tokens create`). Runs are executed at least once; tasks "
            "receive the run id as an idempotency key."
        ),
        lifespan=lifespan,
        docs_url=None,  # served offline below (kit.api.docs_ui), not from a CDN
        redoc_url=None,  # ReDoc's page would load its script from a CDN
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.async_engine = async_engine
    app.state.db_pool = db_pool
    app.state.task_policy = task_policy  # the operator's file, re-read when it changes
    app.state.tenants = tenants  # the operator's tenant policy, likewise
    app.state.tenant_buckets = TenantBuckets()  # API requests per tenant, this process
    app.state.cpu_limiter = cpu_limiter()  # previews and explain, a few at a time
    errors.install(app)
    app.include_router(router, responses=_ERROR_RESPONSES)
    app.include_router(dead_letters_router, responses=_ERROR_RESPONSES)
    app.include_router(queues_router, responses=_ERROR_RESPONSES)
    app.include_router(queue_admin_router, responses=_ERROR_RESPONSES)
    for operate_router in (
        jobs_list_router,
        run_cancel_router,
        run_detail_router,
        backfill_router,
        job_history_router,
        schedule_preview_router,
        fleet_router,
        switches_router,
    ):
        app.include_router(operate_router, responses=_ERROR_RESPONSES)
    install_console(app)  # /console: server-rendered pages behind the same tokens
    install_docs(app)  # /docs: Swagger UI from the API's own files
    # Outermost first: authenticate, then the tenant's request rate, then bound the body.
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(TenantRateLimit, state=lambda: app.state)
    app.state.token_cache = TokenCache(settings.api_token_cache_s)
    app.add_middleware(
        BearerAuth, engine=lambda: app.state.async_engine, cache=app.state.token_cache
    )
    app.add_middleware(RequestMetrics)  # counts refused requests too
    # outermost: an exception no handler took is a 500 and a log line without its text
    app.add_middleware(UnhandledErrors)
    app.add_route("/metrics", metrics_endpoint, include_in_schema=False)

    @app.get("/healthz", tags=["health"], summary="Liveness and database reachability")
    async def healthz(request: Request) -> JSONResponse:
        def ping() -> None:
            with request.app.state.engine.connect() as conn:
                conn.execute(text("SELECT 1"))

        try:
            await run_in_threadpool(ping)
        except Exception as exc:  # any driver error means "not ready"
            return JSONResponse(
                {"status": "unavailable", "database": type(exc).__name__}, status_code=503
            )
        return JSONResponse({"status": "ok"})

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"}
            }
            for path, operations in schema.get("paths", {}).items():
                if path.startswith("/v1"):
                    for operation in operations.values():
                        operation["security"] = [{"bearer": []}]
            app.openapi_schema = declare_body_rules(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
