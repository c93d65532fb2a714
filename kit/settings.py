"""One settings object for the whole kit, read from the environment at the edge.

Precedence: `CRONFLEET_*` environment variables, then the connection file that
`cronfleet stack up` writes (`$CRONFLEET_HOME/stack.env`), then defaults that
work on one machine. Only the CLI and service entry points build a `Settings`;
everything below them receives it as an argument.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from kit.core import defaults
from kit.core.errors import FieldError
from kit.core.outcome import DEFAULT_PAUSE_AFTER_DEAD
from kit.core.shard_map import NAME_RULE, SHARD_NAME


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
        """librdkafka's keys for this security (kit.transport.kafka_client adds them)."""
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


_kafka_security = KafkaSecurity()


def use_kafka_security(security: KafkaSecurity) -> None:
    """Install the process's Kafka security (load_settings does, at the entry points)."""
    global _kafka_security
    _kafka_security = security


def kafka_security_in_use() -> KafkaSecurity:
    return _kafka_security


HOME_SHARD = "home"  # the database_url's shard, by the name the shard map gives it


def parse_shard_urls(text: str) -> dict[str, str]:
    """`NAME=URL,NAME=URL` -> {NAME: URL}; a bad pair is named with its reason."""
    shards: dict[str, str] = {}
    for number, pair in enumerate(p.strip() for p in text.split(",") if p.strip()):
        name, sep, url = pair.partition("=")
        name = name.strip()
        where = f"shard_urls: pair {number + 1} ({name or pair[:20]!r})"
        if not sep or not url.strip():
            raise ValueError(f"{where}: not NAME=URL")
        if not SHARD_NAME.fullmatch(name):
            raise ValueError(f"{where}: a shard's name {NAME_RULE}")
        if name == HOME_SHARD:
            raise ValueError(f"{where}: `{HOME_SHARD}` is the database_url's shard")
        if name in shards:
            raise ValueError(f"{where}: named twice")
        shards[name] = url.strip()
    return shards


def cronfleet_home() -> Path:
    """Where the local stack keeps its data, logs, pid files and connection file."""
    return Path(os.environ.get("CRONFLEET_HOME", Path.home() / ".cronfleet")).expanduser()


def stack_env_file() -> Path:
    return cronfleet_home() / "stack.env"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="CRONFLEET_",
        env_file=None,  # set per instance in load_settings(), so CRONFLEET_HOME is honoured
        extra="ignore",
    )

    database_url: str = Field(
        default="postgresql+psycopg://cronfleet:cronfleet@127.0.0.1:55432/cronfleet",
        description="SQLAlchemy URL of the PostgreSQL database (psycopg 3 driver).",
    )
    shard_urls: str = Field(
        default="",
        description="The shards beyond the home one (`database_url`), as NAME=URL pairs "
        "separated by commas: the servers the trigger index's partitions may be spread over "
        "(docs/shards.md). `cronfleet db upgrade` migrates every one; `cronfleet shards "
        "check` and every service's start refuse shards that do not answer or are at "
        "different revisions. Empty: one database.",
    )
    kafka_bootstrap: str = Field(
        default="127.0.0.1:59092", description="Kafka bootstrap servers, comma separated."
    )
    kafka_security_protocol: str = Field(
        default="PLAINTEXT",
        pattern="^(PLAINTEXT|SSL)$",
        description="PLAINTEXT, or SSL: TLS to the brokers, their names verified.",
    )
    kafka_ssl_ca_location: str | None = Field(
        default=None,
        description="CA certificates (PEM file) the brokers' certificates are checked "
        "against; unset = the system's trust store.",
    )
    kafka_ssl_certificate_location: str | None = Field(
        default=None, description="Client certificate (PEM) for mutual TLS."
    )
    kafka_ssl_key_location: str | None = Field(
        default=None, description="Client private key (PEM) for mutual TLS."
    )
    api_host: str = Field(default="127.0.0.1", description="Address the HTTP API binds to.")
    api_port: int = Field(default=8080, ge=1, le=65535, description="Port of the HTTP API.")
    api_workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Processes `cronfleet api` serves with (each its own pool and event loop).",
    )
    api_token_cache_s: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="How long an API process trusts a verified token without asking the "
        "database again: a revoked token stops working at most this long after the revoke "
        "commits. 0: every request asks.",
    )
    api_db_pool_size: int = Field(
        default=16,
        ge=1,
        le=200,
        description="Database connections per API process (also its handler threads).",
    )
    partitions: int = Field(
        default=1024, ge=1, le=32768, description="Logical partitions of the trigger index."
    )
    one_off_grace_s: int = Field(
        default=60, ge=0, description="How far in the past a one-off time may be when created."
    )
    max_task_spec_bytes: int = Field(
        default=16_384, ge=256, description="Largest accepted task spec (JSON bytes)."
    )
    max_request_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Largest accepted HTTP request body."
    )
    max_queue_payload_bytes: int = Field(
        default=262_144, ge=256, description="Largest task-queue payload or result (JSON bytes)."
    )
    log_level: str = Field(default="INFO", description="Python logging level of services.")

    # The life of a run: scheduler, workers, reaper (see docs/design.md).
    scan_ahead_ms: int = Field(
        default=defaults.SCAN_AHEAD_MS, ge=0, description="How far ahead a node scans."
    )
    partition_lease_ttl_ms: int = Field(
        default=defaults.PARTITION_LEASE_TTL_MS,
        ge=1000,
        description="Partition lease length; a dead node's partitions move after it.",
    )
    node_heartbeat_ms: int = Field(
        default=defaults.NODE_HEARTBEAT_MS, ge=100, description="Scheduler membership beat."
    )
    run_lease_ttl_ms: int = Field(
        default=defaults.RUN_LEASE_TTL_MS,
        ge=1000,
        description="Run lease length; workers heartbeat well within it.",
    )
    run_lease_min_ms: int = Field(
        default=defaults.RUN_LEASE_MIN_MS,
        ge=500,
        description="Shortest lease a job's runs get from their measured p99 (1.5 x p99).",
    )
    run_lease_max_ms: int = Field(
        default=defaults.RUN_LEASE_MAX_MS,
        ge=1000,
        description="Longest lease a job's runs get from their measured p99 (1.5 x p99).",
    )
    reaper_period_ms: int = Field(
        default=defaults.REAPER_PERIOD_MS, ge=100, description="How often the reaper looks."
    )
    unclaimed_grace_ms: int = Field(
        default=defaults.UNCLAIMED_GRACE_MS,
        ge=0,
        description="Age after which a run nobody claimed counts as lost and is published "
        "again (formerly CRONFLEET_UNDISPATCHED_GRACE_MS, still read until the next release).",
    )
    run_topic_partitions: int = Field(default=6, ge=1, description="Partitions per tier topic.")
    run_topic_replication: int = Field(
        default=3,
        ge=1,
        description="Replicas of each run topic (the local stack, one broker, writes 1).",
    )
    run_topic_min_insync: int = Field(
        default=2,
        ge=1,
        description="min.insync.replicas of the run topics: acks=all means on this many brokers.",
    )
    worker_group: str = Field(
        default="cronfleet-workers",
        min_length=1,
        description="Kafka consumer group of the workers (the reaper reads its progress).",
    )
    worker_concurrency: int = Field(default=8, ge=1, description="Runs a worker executes at once.")
    worker_session_timeout_ms: int = Field(
        default=10_000,
        ge=1000,
        description=(
            "Kafka group session of a worker's consumers: how long a worker that died without "
            "leaving holds its partitions (and a joining worker waits). The broker refuses "
            "values below its group.min.session.timeout.ms (6 s by default)."
        ),
    )
    execution_journal_dir: str = Field(
        default="",
        description="Where each worker appends a line per task start (<worker id>.journal).",
    )
    worker_prefetch: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Runs a worker claims ahead of their second (or of a free slot) at most.",
    )
    http_allow_hosts: str = Field(
        default="",
        description=(
            "Comma-separated hosts/CIDRs every tenant's http tasks may reach even if "
            "private/loopback (a tenant's own holes go in the task policy file)."
        ),
    )
    task_policy_file: str = Field(
        default="",
        description=(
            "TOML file of what each tenant's tasks may do: command executables, run-as "
            "user, egress allow-list (kit/tasks/policy.py). Empty: no tenant runs commands."
        ),
    )
    tenant_policy_file: str = Field(
        default="",
        description=(
            "TOML file of what each tenant may take of the fleet: weight, class, priority "
            "tiers, most jobs, runs, starts, queued tasks, API rate (kit/core/tenancy.py, "
            "docs/tenants.md). Empty: every tenant gets the defaults (no `critical` tier, "
            "no other limit)."
        ),
    )

    def shards(self) -> dict[str, str]:
        """Every shard by name, the home shard (`database_url`) first."""
        return {HOME_SHARD: self.database_url, **parse_shard_urls(self.shard_urls)}

    def secret_values(self) -> tuple[str, ...]:
        """The worker's own secrets, scrubbed from whatever a run records: every shard's
        database URL and its password (a task never sees them; this is the second line)."""
        from sqlalchemy.engine import make_url

        values: list[str] = []
        for url in self.shards().values():
            values.append(url)
            try:
                password = make_url(url).password
            except Exception:  # an unparsable URL fails at connect, not here
                password = None
            if password:
                values.append(str(password))
        return tuple(dict.fromkeys(values))

    # Operating at scale: what the maintenance service expires, and the operator's views.
    maintenance_period_ms: int = Field(
        default=60_000, ge=1000, description="How often `cronfleet maintenance` expires rows."
    )
    idempotency_key_retention_s: int = Field(
        default=86_400, ge=60, description="How long a job create's Idempotency-Key is kept."
    )
    queue_task_retention_s: int = Field(
        default=7 * 86_400,
        ge=60,
        description="How long a finished (done or dead) queue task is kept after it finished.",
    )
    dead_letter_retention_s: int = Field(
        default=30 * 86_400,
        ge=60,
        description="How long a dead letter not replayed is kept after the run died.",
    )
    replayed_dead_letter_retention_s: int = Field(
        default=86_400,
        ge=60,
        description="How long a replayed dead letter is kept once its run is no longer live.",
    )
    audit_retention_s: int = Field(
        default=400 * 86_400, ge=86_400, description="How long job audit entries are kept."
    )
    run_retention_s: int = Field(
        default=30 * 86_400,
        ge=86_400,
        description="How long run history is kept after its scheduled day ends (a day's "
        "partition is dropped whole; live and dead-lettered runs are kept).",
    )
    run_output_retention_s: int = Field(
        default=7 * 86_400,
        ge=60,
        description="How long an attempt's output excerpt (stdout/stderr, an HTTP "
        "response) is kept after the attempt finished.",
    )
    notification_retention_s: int = Field(
        default=7 * 86_400,
        ge=60,
        description="How long a failure notification is kept after it was sent or given up.",
    )
    notify_period_ms: int = Field(
        default=2000,
        ge=100,
        description="How often `cronfleet maintenance` sends the failure notifications due.",
    )
    pause_after_dead: int = Field(
        default=DEFAULT_PAUSE_AFTER_DEAD,
        ge=0,
        le=10_000,
        description="A job that names no `pause_after_dead` is paused after this many dead "
        "letters in a row (0: such jobs never pause). A job opts out with 0.",
    )
    run_days_ahead: int = Field(
        default=3,
        ge=1,
        le=60,
        description="How many days ahead the maintenance creates run history partitions.",
    )
    max_backfill_runs: int = Field(
        default=1000, ge=1, le=100_000, description="Most runs one backfill may owe."
    )
    console_session_ttl_s: int = Field(
        default=8 * 3600, ge=60, description="Console session lifetime after login."
    )
    console_secure_cookie: bool = Field(
        default=False,
        description="Mark the console cookie Secure even on plain HTTP (behind a TLS proxy).",
    )
    operator_tenant: str = Field(
        default="",
        max_length=200,
        description="The operator's own tenant: its tokens with the `admin` scope see the "
        "fleet-wide view (GET /v1/fleet, the console's fleet page). A tenant that runs no "
        "customer's jobs. Empty: no token does (the services' metrics ports still do).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        self.shards()  # a malformed CRONFLEET_SHARD_URLS fails here, naming the pair
        if self.run_topic_min_insync > self.run_topic_replication:
            raise ValueError(
                "run_topic_min_insync: must not exceed run_topic_replication "
                f"({self.run_topic_min_insync} > {self.run_topic_replication})"
            )
        for name in ("ca", "certificate", "key"):
            name = f"kafka_ssl_{name}_location"
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"{name}: no such file: {path}")
        if bool(self.kafka_ssl_certificate_location) != bool(self.kafka_ssl_key_location):
            raise ValueError(
                "kafka_ssl_certificate_location: a client certificate needs its key "
                "(kafka_ssl_key_location) and the other way round"
            )
        if self.run_lease_min_ms > self.run_lease_max_ms:
            raise ValueError(
                "run_lease_min_ms: must not exceed run_lease_max_ms "
                f"({self.run_lease_min_ms} > {self.run_lease_max_ms})"
            )
        if self.scan_ahead_ms >= self.unclaimed_grace_ms:
            # A run is committed up to scan_ahead_ms before its second and published at
            # it: a grace no longer than that would have the reaper publish it early.
            raise ValueError(
                "scan_ahead_ms: must be below unclaimed_grace_ms "
                f"({self.scan_ahead_ms} >= {self.unclaimed_grace_ms})"
            )
        return self

    def kafka_security(self) -> KafkaSecurity:
        return KafkaSecurity(
            self.kafka_security_protocol,
            self.kafka_ssl_ca_location,
            self.kafka_ssl_certificate_location,
            self.kafka_ssl_key_location,
        )


# Settings renamed for what the kit does now; the old names are still read, with a
# warning, until the next release (tests/unit/test_settings.py holds it).
RENAMED: dict[str, str] = {"undispatched_grace_ms": "unclaimed_grace_ms"}


def _renamed(overrides: dict[str, object]) -> dict[str, object]:
    """The overrides with every old name (an argument or a CRONFLEET_* variable) moved to
    its new one, unless the new one is set too (then the new one wins)."""
    out = dict(overrides)
    for old, new in RENAMED.items():
        old_env, new_env = f"CRONFLEET_{old.upper()}", f"CRONFLEET_{new.upper()}"
        value = out.pop(old, None)
        if value is None and old_env in os.environ:
            value = os.environ[old_env]
        if value is None:
            continue
        warnings.warn(
            f"{old_env} is renamed {new_env}; the old name is read until the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        logging.getLogger(__name__).warning("%s is renamed %s", old_env, new_env)
        if new not in out and new_env not in os.environ:
            out[new] = value
    return out


def load_settings(**overrides: object) -> Settings:
    """Build the settings: environment first, then the stack's connection file, then defaults.

    A bad value is a FieldError naming the CRONFLEET_* variable, which the CLI prints as
    one line (exit 2) before any service starts."""
    env_file = stack_env_file()
    kwargs: dict[str, object] = {}
    if env_file.exists():
        kwargs["_env_file"] = str(env_file)
    overrides = _renamed(overrides)
    try:
        settings = Settings(**kwargs, **overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ())]
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        if loc:
            raise FieldError(f"CRONFLEET_{loc[0].upper()}", message) from None
        name, _, reason = message.partition(": ")
        raise FieldError(f"CRONFLEET_{name.upper()}", reason or message) from None
    use_kafka_security(settings.kafka_security())
    return settings
