"""Kafka security settings: validated at the edge, naming the variable; installed for every
client the process makes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kit.core.errors import FieldError
from kit.settings import load_settings
from kit.transport.kafka_client import (
    RECONNECT_BACKOFF_MAX_MS,
    KafkaSecurity,
    client_config,
    use_security,
)


@pytest.fixture(autouse=True)
def _plaintext_after() -> Iterator[None]:
    yield
    use_security(KafkaSecurity())


def test_plaintext_adds_no_security_setting() -> None:
    load_settings()
    assert client_config("b:1", **{"acks": "all"}) == {
        "bootstrap.servers": "b:1",
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        "acks": "all",
    }


def test_every_client_tries_a_broker_that_was_away_again_within_a_second() -> None:
    """librdkafka's default backs off up to 10 s; a caller may still choose its own."""
    assert client_config("b:1")["reconnect.backoff.max.ms"] <= 1000
    assert (
        client_config("b:1", **{"reconnect.backoff.max.ms": 50})["reconnect.backoff.max.ms"] == 50
    )


def test_loading_tls_settings_puts_every_client_on_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    load_settings(kafka_security_protocol="SSL", kafka_ssl_ca_location=str(ca))
    conf = client_config("b:1")
    assert conf["security.protocol"] == "SSL"
    assert conf["ssl.ca.location"] == str(ca)
    assert conf["ssl.endpoint.identification.algorithm"] == "https"


@pytest.mark.parametrize(
    ("overrides", "field", "reason"),
    [
        ({"kafka_security_protocol": "SASL_SSL"}, "CRONFLEET_KAFKA_SECURITY_PROTOCOL", "pattern"),
        (
            {"kafka_security_protocol": "SSL", "kafka_ssl_ca_location": "/nonexistent/ca.pem"},
            "CRONFLEET_KAFKA_SSL_CA_LOCATION",
            "no such file",
        ),
    ],
)
def test_bad_settings_name_the_variable(overrides: dict, field: str, reason: str) -> None:
    with pytest.raises(FieldError) as err:
        load_settings(**overrides)
    assert field in str(err.value) and reason in str(err.value)


def test_a_client_certificate_needs_its_key(tmp_path: Path) -> None:
    cert = tmp_path / "client.pem"
    cert.write_text("x")
    with pytest.raises(FieldError, match="CRONFLEET_KAFKA_SSL_CERTIFICATE_LOCATION"):
        load_settings(kafka_security_protocol="SSL", kafka_ssl_certificate_location=str(cert))
