"""The test Kafka broker: one Apache Kafka node in KRaft mode (broker and controller in one JVM)
on 127.0.0.1, from the JARs ``make jars`` resolves into ``.venv/kafka-broker-jars``
(``jars/kafka-broker/pom.xml``), never on Spark's classpath.

:func:`start` formats a log folder with a random cluster id (``kafka.tools.StorageTool``, what
``kafka-storage.sh format`` runs), starts ``kafka.Kafka`` with its client, controller and
advertised listeners all on free ports of 127.0.0.1, and returns once a metadata request
answers; :meth:`KafkaBroker.stop` ends it, :meth:`KafkaBroker.restart` starts it again on the
same ports and log folder (as a broker's host restarts it: its topics and records are kept).
"""

from __future__ import annotations

import base64
import contextlib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaAdminClient
from kafka.errors import KafkaError

__all__ = ["BROKER_JARS", "KafkaBroker", "start"]

BROKER_JARS = Path(sys.prefix) / "kafka-broker-jars"
START_TIMEOUT = 180.0
"""Seconds a broker may take to answer (a cold JVM on a busy 2-core machine takes 5 to 30)."""
_PROPERTIES = "server.properties"
_OUTPUT = "broker.log"


@dataclass
class KafkaBroker:
    port: int
    controller_port: int
    cluster_id: str
    folder: Path
    """Its ``server.properties``, its output (``broker.log``) and its log folder (``data``)."""
    jars: Path
    process: subprocess.Popen[bytes]
    """The broker's JVM (a new one after :meth:`restart`)."""

    @property
    def log_dir(self) -> Path:
        return self.folder / "data"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, request_timeout_ms=30_000)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self) -> None:
        """Stop the broker if it runs, start it again on its ports and log folder, and return
        once it answers."""
        self.stop()
        self.process = _launch(self.folder, self.jars)
        try:
            _wait_until_up(self, self.folder / _OUTPUT)
        except BaseException:
            self.stop()
            raise

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """The broker stopped for the ``with`` block and restarted after it, also when the block
        raises: the session's other tests find it as before."""
        self.stop()
        try:
            yield
        finally:
            self.restart()


def _cluster_id() -> str:
    """A random cluster id, as Kafka's ``Uuid.randomUuid`` makes one: never starting with ``-``
    (``kafka-storage format -t -x...`` takes it for an option: 1 id in 64 did)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def start(folder: Path, jars: Path = BROKER_JARS) -> KafkaBroker:
    """Format ``folder`` and start a broker on it (see the module)."""
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise RuntimeError(
            f"no Kafka broker in {jars}: run `make jars` (Maven resolves "
            "jars/kafka-broker/pom.xml there)"
        )
    port, controller_port = _free_port(), _free_port()
    cluster_id = _cluster_id()
    log_dir = folder / "data"
    properties = folder / _PROPERTIES
    properties.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={log_dir}",
                "num.partitions=1",
                "auto.create.topics.enable=false",
                "log.retention.ms=-1",  # keep every record, whatever its timestamp
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "",
            ]
        )
    )
    output = folder / _OUTPUT
    with output.open("ab") as log:
        format_storage = ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c"]
        subprocess.run(
            [*_java(jars), *format_storage, str(properties)],
            check=True,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=START_TIMEOUT,
        )
    broker = KafkaBroker(port, controller_port, cluster_id, folder, jars, _launch(folder, jars))
    try:
        _wait_until_up(broker, output)
    except BaseException:
        broker.stop()
        raise
    return broker


def _java(jars: Path) -> list[str]:
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{jars}/*"]


def _launch(folder: Path, jars: Path) -> subprocess.Popen[bytes]:
    """``kafka.Kafka`` on the folder's (formatted) properties, its output appended to its log."""
    with (folder / _OUTPUT).open("ab") as log:
        return subprocess.Popen(
            [*_java(jars), "kafka.Kafka", str(folder / _PROPERTIES)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _wait_until_up(broker: KafkaBroker, output: Path) -> None:
    """Until the port accepts and a metadata request lists the broker."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if broker.process.poll() is not None:
            raise RuntimeError(
                f"the Kafka broker exited with {broker.process.returncode}: {output.read_text()}"
            )
        try:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=2):
                pass
            admin = broker.admin()
            try:
                if admin.describe_cluster()["brokers"]:
                    return
            finally:
                admin.close()
        except (OSError, KafkaError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Kafka broker did not answer in {START_TIMEOUT:.0f} s")
        time.sleep(0.5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
