"""Every Kafka client the kit makes gets its configuration here, so one setting puts
the whole process on TLS.

A process talks to one cluster with one identity: the security settings are installed
once at the edge (`load_settings`, which keeps them in kit.settings) instead of threaded
through every constructor that already receives the bootstrap string."""

from __future__ import annotations

from typing import Any

from kit.settings import KafkaSecurity, kafka_security_in_use
from kit.settings import use_kafka_security as use_security

__all__ = ["KafkaSecurity", "client_config", "use_security"]


# librdkafka doubles its wait between attempts to reach a broker that is away up to
# reconnect.backoff.max.ms (default 10 s, with -25 % to +50 % jitter): a client could
# then sleep through part of that after the broker is back, and every run it publishes
# or reads waits with it. Measured after a broker kill: back within 0.3 s of the broker,
# against 0.2-1.0 s with the default (benchmarks/broker_restart.py, docs/chaos.md).
RECONNECT_BACKOFF_MAX_MS = 1000


def client_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """A librdkafka configuration: the brokers, the process's security, then `extra`.
    Keys use librdkafka's dotted names; pass them as a dict with `**{...}`."""
    return {
        "bootstrap.servers": bootstrap,
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        **kafka_security_in_use().config(),
        **extra,
    }
