"""The kit over TLS to the brokers: the local stack's broker has a TLS listener with a
self-signed certificate (`cronfleet stack up`); a worker configured only through its
environment (CRONFLEET_KAFKA_SECURITY_PROTOCOL=SSL and the CA file) consumes and runs a
run published over TLS, and a client that does not trust the certificate gets nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from kit.settings import Settings
from kit.stack.kafka.broker import Broker
from kit.transport import PublishError, RunMessage, RunPublisher, ensure_topics
from kit.transport.kafka_client import KafkaSecurity, client_config, use_security
from tests.integration.test_worker_e2e import ledger_task, publish, wait_for
from tests.integration.worker_rows import make_job, make_run

pytestmark = pytest.mark.integration


@pytest.fixture
def broker() -> Broker:
    broker = Broker.default()
    assert broker.ca_file.is_file(), "the stack's broker has no TLS listener: cronfleet stack up"
    return broker


@pytest.fixture
def over_tls(broker: Broker) -> Iterator[KafkaSecurity]:
    """This process's clients on TLS for the test, plaintext again after."""
    security = KafkaSecurity("SSL", ca_location=str(broker.ca_file))
    use_security(security)
    try:
        yield security
    finally:
        use_security(KafkaSecurity())


def test_a_worker_configured_for_tls_runs_a_run_published_over_tls(
    engine: Engine, settings: Settings, db_url: str, broker: Broker, shared_dir: Path,
    over_tls: KafkaSecurity,  # last: loading settings installs their (plaintext) security
) -> None:  # fmt: skip
    assert client_config("x")["security.protocol"] == "SSL"
    prefix = f"cf.tls.{uuid.uuid4().hex[:10]}"
    ensure_topics(broker.tls_bootstrap(), 1, prefix=prefix)
    ledger = shared_dir / "ledger"
    rid = make_run(engine, make_job(engine, task=ledger_task(ledger)))
    publisher = RunPublisher(broker.tls_bootstrap(), topic_prefix=prefix)
    publish(publisher, engine, rid)
    env = {
        **os.environ,
        "CRONFLEET_DATABASE_URL": db_url,
        "CRONFLEET_KAFKA_BOOTSTRAP": broker.tls_bootstrap(),
        "CRONFLEET_KAFKA_SECURITY_PROTOCOL": "SSL",
        "CRONFLEET_KAFKA_SSL_CA_LOCATION": str(broker.ca_file),
        "CRONFLEET_TASK_POLICY_FILE": settings.task_policy_file,
        "CRONFLEET_TENANT_POLICY_FILE": settings.tenant_policy_file,
    }
    argv = [sys.executable, "-m", "kit.worker.cli", "--worker-id", "tls", "--topic-prefix"]
    argv += [prefix, "--group-id", f"g-{uuid.uuid4().hex[:8]}", "--metrics-port", "0"]
    proc = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        assert wait_for(engine, rid, "succeeded", "dead").status == "succeeded"
        assert ledger.read_text().split() == [rid]
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_broker_certificate_nobody_vouches_for_is_refused(broker: Broker) -> None:
    """TLS with the system's trust store (which does not hold the stack's self-signed
    certificate): the publish fails, nothing is sent in clear."""
    use_security(KafkaSecurity("SSL"))
    try:
        publisher = RunPublisher(broker.tls_bootstrap(), topic_prefix="cf.tls.refused")
        with pytest.raises(PublishError):
            run = RunMessage(str(uuid.uuid4()), str(uuid.uuid4()), 1, 0, "normal")
            publisher.publish([run], timeout_s=5.0)
    finally:
        use_security(KafkaSecurity())
