"""The stack's Kafka: one real broker in KRaft mode (broker and controller in one JVM).

Jars come from Maven Central through the small Maven project beside this file and
are cached per version in $CRONFLEET_HOME/kafka/lib-<version>, marked complete by a
stamp holding the pom's hash, so only the first `up` on a machine fetches.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import shutil
import subprocess
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kit.settings import cronfleet_home
from kit.stack.process import (
    StackError,
    alive,
    choose_port,
    load_state,
    log_tail,
    progress,
    read_pid,
    save_state,
    start_again_on_bind_race,
    terminate,
    wait_until,
)

POM = Path(__file__).with_name("pom.xml")
PREFERRED_PORT = 59092
PREFERRED_CONTROLLER_PORT = 59093
PREFERRED_TLS_PORT = 59094
START_TIMEOUT_S = 90
FETCH_TIMEOUT_S = 900
JAVA_MIN_MAJOR = 17
NODE_ID = 1

SERVER_PROPERTIES = """# written by `cronfleet stack up` on every start; edits are overwritten
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={node_id}@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{tls_port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{tls_port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT
ssl.keystore.type=PKCS12
ssl.keystore.location={keystore}
ssl.keystore.password={keystore_password}
ssl.key.password={keystore_password}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs={data}
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=24
"""

LOG4J2_PROPERTIES = """# written by `cronfleet stack up`:
# the broker's log in logs/server.log, rolled at 64 MB and five kept (unrolled, a soak's
# broker log reached 15 GB); warnings and errors also to stdout, i.e. kafka.log, with
# what the JVM itself prints
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
appender.out.filter.threshold.type = ThresholdFilter
appender.out.filter.threshold.level = WARN
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.filePattern = ${sys:kafka.logs.dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 64MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 4
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def kafka_version() -> str:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(POM).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not node.text:
        raise StackError(f"kafka: no kafka.version property in {POM}")
    return node.text.strip()


@dataclass(frozen=True)
class Broker:
    """Where the stack's broker lives; paths only, state is on disk."""

    root: Path

    @classmethod
    def default(cls) -> Broker:
        return cls(cronfleet_home() / "kafka")

    @property
    def lib(self) -> Path:
        return self.root / f"lib-{kafka_version()}"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def config(self) -> Path:
        return self.root / "server.properties"

    @property
    def log(self) -> Path:
        return self.root / "kafka.log"

    @property
    def pid_file(self) -> Path:
        return self.root / "kafka.pid"

    @property
    def port(self) -> int:
        return load_state().get("kafka_port", PREFERRED_PORT)

    @property
    def controller_port(self) -> int:
        return load_state().get("kafka_controller_port", PREFERRED_CONTROLLER_PORT)

    @property
    def tls_port(self) -> int:
        return load_state().get("kafka_tls_port", PREFERRED_TLS_PORT)

    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def tls_bootstrap(self) -> str:
        """The TLS listener (CRONFLEET_KAFKA_SECURITY_PROTOCOL=SSL with `ca_file`)."""
        return f"127.0.0.1:{self.tls_port}"

    @property
    def ca_file(self) -> Path:
        """The broker's self-signed certificate, for clients to verify it by."""
        return self.root / "tls" / "ca.pem"

    def pid(self) -> int | None:
        """The broker's pid when the process from our pid file still runs our config."""
        pid = read_pid(self.pid_file)
        return pid if pid is not None and alive(pid, str(self.config)) else None

    def answers(self, timeout_s: float = 3.0) -> bool:
        from confluent_kafka.admin import AdminClient

        # log_level 0: the client would otherwise print connection refusals while we poll
        admin = AdminClient({"bootstrap.servers": self.bootstrap(), "log_level": 0})
        try:
            admin.list_topics(timeout=timeout_s)
        except Exception:  # KafkaException on timeout or refusal
            return False
        return True

    # --- up ----------------------------------------------------------------------------

    def up(self) -> None:
        java = java_binary()
        if self.pid() is not None and "kafka_tls_port" not in load_state():
            progress("kafka: restarting a broker started without the TLS listener")
            self.down()
        if self.pid() is not None:
            if self.answers():
                progress(f"kafka: already running on {self.bootstrap()}")
                return
            progress("kafka: running but not answering yet; waiting")
            self._wait(lambda: self.pid() is not None)
            return
        self.fetch_jars()
        start_again_on_bind_race("kafka", self.log, lambda: self._choose_ports_and_start(java))

    def _choose_ports_and_start(self, java: str) -> None:
        self.pid_file.unlink(missing_ok=True)  # a failed attempt's, if any
        port = choose_port(self.port, "kafka")
        controller_port = choose_port(self.controller_port, "kafka controller", avoid=(port,))
        tls_port = choose_port(self.tls_port, "kafka tls", avoid=(port, controller_port))
        save_state(kafka_port=port, kafka_controller_port=controller_port, kafka_tls_port=tls_port)
        self._write_keystore(java)
        self._write_config()
        self._format(java)
        self._start(java)

    def fetch_jars(self) -> None:
        """Resolve the broker's jars once per version; a stamp marks a complete copy."""
        pom_hash = hashlib.sha256(POM.read_bytes()).hexdigest()
        stamp = self.lib / ".complete"
        if stamp.exists() and stamp.read_text().strip() == pom_hash:
            return
        mvn = shutil.which("mvn")
        if mvn is None:
            raise StackError("kafka: `mvn` not found; install Maven (apt-get install -y maven)")
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.lib.with_name(self.lib.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        fetch_log = self.root / "mvn.log"
        progress(
            f"kafka: fetching Kafka {kafka_version()} jars from Maven Central (log: {fetch_log})"
        )
        cmd = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM),
               "dependency:copy-dependencies", f"-DoutputDirectory={partial}"]  # fmt: skip
        with fetch_log.open("w") as out:
            try:
                done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT,
                                      timeout=FETCH_TIMEOUT_S, cwd=self.root)  # fmt: skip
            except subprocess.TimeoutExpired:
                raise StackError(f"kafka: Maven fetch took over {FETCH_TIMEOUT_S}s") from None
        jars = list(partial.glob("kafka_2.13-*.jar"))
        if done.returncode != 0 or not jars:
            shutil.rmtree(partial, ignore_errors=True)
            reason = _last_error_line(fetch_log)
            raise StackError(f"kafka: Maven fetch failed (exit {done.returncode}): {reason}")
        shutil.rmtree(self.lib, ignore_errors=True)
        partial.rename(self.lib)
        stamp.write_text(pom_hash + "\n")
        progress(f"kafka: {len(list(self.lib.glob('*.jar')))} jars cached in {self.lib}")

    @property
    def keystore(self) -> Path:
        return self.root / "tls" / "broker.p12"

    def _write_keystore(self, java: str) -> None:
        """A self-signed certificate for 127.0.0.1 (and localhost), made once with the JDK's
        keytool; its password is random and readable by the owner only."""
        from kit.stack.postgres import write_private

        password_file = self.root / "tls" / "keystore.password"
        if self.keystore.exists() and self.ca_file.exists() and password_file.exists():
            return
        tls = self.keystore.parent
        shutil.rmtree(tls, ignore_errors=True)
        tls.mkdir(parents=True, mode=0o700)
        password = secrets.token_urlsafe(24)
        write_private(password_file, password + "\n")
        keytool = str(Path(java).resolve().with_name("keytool"))
        store = ["-keystore", str(self.keystore), "-storetype", "PKCS12", "-storepass", password]
        for cmd in (
            [keytool, "-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048",
             "-validity", "3650", "-dname", "CN=localhost", "-keypass", password,
             "-ext", "SAN=IP:127.0.0.1,DNS:localhost", "-ext", "BC:c", *store],
            [keytool, "-exportcert", "-rfc", "-alias", "broker", "-file", str(self.ca_file),
             *store],
        ):  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                lines = (done.stderr + done.stdout).strip().splitlines()
                raise StackError(f"kafka: keytool failed: {lines[-1] if lines else '?'}")
        self.keystore.chmod(0o600)

    def _write_config(self) -> None:
        from kit.stack.postgres import write_private

        self.data.mkdir(parents=True, exist_ok=True)
        password = (self.root / "tls" / "keystore.password").read_text().strip()
        write_private(  # carries the keystore's password
            self.config,
            SERVER_PROPERTIES.format(
                node_id=NODE_ID,
                port=self.port,
                tls_port=self.tls_port,
                controller_port=self.controller_port,
                data=self.data,
                keystore=self.keystore,
                keystore_password=password,
            ),
        )
        (self.root / "log4j2.properties").write_text(LOG4J2_PROPERTIES)

    def _java_cmd(self, java: str, main: str, *args: str) -> list[str]:
        return [
            java, "-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.root / 'logs'}",
            "-cp", f"{self.lib}/*", main, *args,
        ]  # fmt: skip

    def _format(self, java: str) -> None:
        """Format the log dir once; a static voter set needs neither --standalone nor
        --initial-controllers, and tolerates a changed controller port on restart."""
        if (self.data / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        progress(f"kafka: formatting storage {self.data} (cluster {cluster_id})")
        cmd = self._java_cmd(java, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                             "-c", str(self.config))  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            lines = (done.stderr + done.stdout).strip().splitlines()
            raise StackError(f"kafka: storage format failed: {lines[-1] if lines else '?'}")

    def _start(self, java: str) -> None:
        progress(f"kafka: starting broker on {self.bootstrap()} (log: {self.log})")
        with self.log.open("ab") as out:
            proc = subprocess.Popen(
                self._java_cmd(java, "kafka.Kafka", str(self.config)),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.root,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        self._wait(lambda: proc.poll() is None)

    def _wait(self, running: Callable[[], bool]) -> None:
        def ready() -> bool:
            if not running():
                raise StackError(f"kafka: broker exited during start; log tail:\n{self._tail()}")
            return self.answers(timeout_s=2.0)

        if not wait_until(ready, START_TIMEOUT_S, interval_s=1.0):
            raise StackError(
                f"kafka: broker did not answer within {START_TIMEOUT_S}s; log tail:\n{self._tail()}"
            )
        progress(f"kafka: broker answers on {self.bootstrap()}")

    def _tail(self) -> str:
        return log_tail(self.log, 25)

    # --- down --------------------------------------------------------------------------

    def down(self) -> None:
        pid = self.pid()
        if pid is None:
            progress("kafka: not running")
            self.pid_file.unlink(missing_ok=True)
            return
        progress(f"kafka: stopping broker (pid {pid})")
        terminate(pid, str(self.config), grace_s=30.0)
        self.pid_file.unlink(missing_ok=True)


def java_binary() -> str:
    """`java` of at least version 17 (Kafka 4.x brokers need it), or a one-line error."""
    java = shutil.which("java")
    hint = "install it with: apt-get install -y openjdk-17-jre-headless"
    if java is None:
        raise StackError(f"kafka: `java` not found; {hint}")
    done = subprocess.run([java, "-version"], capture_output=True, text=True)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8.0_..." style
        major = int(match.group(2))
    if major < JAVA_MIN_MAJOR:
        raise StackError(f"kafka: needs Java {JAVA_MIN_MAJOR}+, found {major or '?'}; {hint}")
    return java


def _last_error_line(log: Path) -> str:
    lines = [ln for ln in log_tail(log, 200).splitlines() if "ERROR" in ln] or [log_tail(log, 1)]
    return lines[0].strip()[:300]
