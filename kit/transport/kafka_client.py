"""Every Kafka client the kit makes gets its configuration here, so one setting puts
the whole process on TLS.

A process talks to one cluster with one identity: the security settings are installed
once at the edge (`load_settings`) instead of threaded through every constructor that
already receives the bootstrap string."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL")


@dataclass(frozen=True)
class KafkaSecurity:
    """How clients reach the brokers: plaintext, or TLS verified against a CA file (the
    system's trust store when none is given, as for Amazon MSK), optionally with a
    client certificate (mutual TLS)."""

    protocol: str = "PLAINTEXT"
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None

    def config(self) -> dict[str, str]:
        if self.protocol == "PLAINTEXT":
            return {}
        conf = {
            "security.protocol": self.protocol,
            "ssl.endpoint.identification.algorithm": "https",  # the broker's name is checked
        }
        for key, value in (
            ("ssl.ca.location", self.ca_location),
            ("ssl.certificate.location", self.certificate_location),
            ("ssl.key.location", self.key_location),
        ):
            if value:
                conf[key] = value
        return conf


_security = KafkaSecurity()


def use_security(security: KafkaSecurity) -> None:
    """Install the process's Kafka security (the entry points do, through load_settings)."""
    global _security
    _security = security


def client_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """A librdkafka configuration: the brokers, the process's security, then `extra`.
    Keys use librdkafka's dotted names; pass them as a dict with `**{...}`."""
    return {"bootstrap.servers": bootstrap, **_security.config(), **extra}
