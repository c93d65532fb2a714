"""The engine: one pool per process, built from the settings at the edge."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine


def engine_for(database_url: str, pool_size: int = 10) -> Engine:
    return create_engine(
        database_url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
    )
