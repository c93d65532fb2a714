"""What a route reads from the application: the engine and the settings (set by
create_app), and the fleet view's Kafka names (set by `cronfleet api`)."""

from __future__ import annotations

from fastapi import Request
from sqlalchemy import Engine

from kit.settings import Settings
from kit.transport.message import DEFAULT_TOPIC_PREFIX


def engine_of(request: Request) -> Engine:
    return request.app.state.engine


def settings_of(request: Request) -> Settings:
    return request.app.state.settings


def topic_prefix_of(request: Request) -> str:
    return getattr(request.app.state, "topic_prefix", DEFAULT_TOPIC_PREFIX)


def group_id_of(request: Request) -> str:
    return getattr(request.app.state, "group_id", settings_of(request).worker_group)
