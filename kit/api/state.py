"""What a route reads from the application: the engines and the settings (set by
create_app), and the fleet view's Kafka names (set by `cronfleet api`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from fastapi import Request
from sqlalchemy import Engine

from kit.settings import Settings
from kit.store.db import on_loop
from kit.store.pg_async import AsyncPool
from kit.transport.message import DEFAULT_TOPIC_PREFIX


def engine_of(request: Request) -> Engine:
    return request.app.state.engine


P = ParamSpec("P")
T = TypeVar("T")


async def in_store(
    request: Request,
    fn: Callable[Concatenate[Engine, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Call a store function from an async handler, on the event loop: no worker thread
    (kit.store.db.on_loop). Run-now and a run's read use it; the hottest routes (the
    queue's, the jobs CRUD and a job's runs) call the store's `*_async` functions on
    `db_pool`; the rest are sync handlers on `engine_of` in the thread pool."""
    return await on_loop(request.app.state.async_engine, fn, *args, **kwargs)


def db_pool(request: Request) -> AsyncPool:
    """The hot routes' async connections (the store's `*_async` functions: the queue's,
    the jobs CRUD, a job's runs)."""
    return request.app.state.db_pool


def settings_of(request: Request) -> Settings:
    return request.app.state.settings


def topic_prefix_of(request: Request) -> str:
    return getattr(request.app.state, "topic_prefix", DEFAULT_TOPIC_PREFIX)


def group_id_of(request: Request) -> str:
    return getattr(request.app.state, "group_id", settings_of(request).worker_group)
