"""A local Kafka broker: one Apache Kafka node in KRaft mode (broker and controller in one JVM)
on 127.0.0.1, from the JARs ``make jars`` resolves into ``.venv/kafka-broker-jars``
(``jars/kafka-broker/pom.xml``), never on Spark's classpath. The tests' broker
(``tests/conftest.py``) and ``make kafka`` / ``make kafka-down`` (docs/streaming.md) are
both this one.

:func:`start` formats a log folder with a random cluster id (``kafka.tools.StorageTool``, what
``kafka-storage.sh format`` runs), starts ``kafka.Kafka`` with its client, controller and
advertised listeners all on ports of 127.0.0.1 (free ones unless given), and returns once a
metadata request answers; :meth:`KafkaBroker.stop` ends it, :meth:`KafkaBroker.restart` starts
it again on the same ports and log folder (as a broker's host restarts it: its topics and
records are kept).

As a command (``make kafka`` runs ``start``, ``make kafka-down`` runs ``stop``)::

    .venv/bin/python scripts/kafka_broker.py start [--home DIR] [--port 9092] [--topic clicks]
    .venv/bin/python scripts/kafka_broker.py stop [--home DIR]

``start`` runs the broker in the background, in a session of its own, on the folder
``<home>/kafka`` (home: ``--home``, else ``STATECORE_HOME``, else ``./.statecore``), creates the
topic (3 partitions) when missing, and prints the bootstrap address and how to point the
``streaming_kafka`` DAG at it; a second ``start`` finds it running. ``stop`` ends it (SIGTERM,
Kafka's clean shutdown) and waits until its JVM is gone; its topics stay in the folder for the
next ``start``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
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

__all__ = ["BROKER_JARS", "KafkaBroker", "main", "start"]

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
        self.process = _launch(self.folder, self.jars, detached=False)
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


def start(
    folder: Path, jars: Path = BROKER_JARS, *, port: int | None = None, detached: bool = False
) -> KafkaBroker:
    """Format ``folder`` and start a broker on it (see the module): on ``port`` if given, else
    on a free one; ``detached``: in a session of its own (a terminal's Ctrl-C does not reach it,
    and it outlives its starter)."""
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise RuntimeError(
            f"no Kafka broker in {jars}: run `make jars` (Maven resolves "
            "jars/kafka-broker/pom.xml there)"
        )
    if port is not None and not _port_is_free(port):
        raise RuntimeError(f"port {port} of 127.0.0.1 is taken: choose another one")
    port, controller_port = port or _free_port(), _free_port()
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
    process = _launch(folder, jars, detached=detached)
    broker = KafkaBroker(port, controller_port, cluster_id, folder, jars, process)
    try:
        _wait_until_up(broker, output)
    except BaseException:
        broker.stop()
        raise
    return broker


def _java(jars: Path) -> list[str]:
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{jars}/*"]


def _launch(folder: Path, jars: Path, *, detached: bool) -> subprocess.Popen[bytes]:
    """``kafka.Kafka`` on the folder's (formatted) properties, its output appended to its log."""
    with (folder / _OUTPUT).open("ab") as log:
        return subprocess.Popen(
            [*_java(jars), "kafka.Kafka", str(folder / _PROPERTIES)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=detached,
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


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# The local broker of ``make kafka``: its folder holds the broker's files and ``broker.json``
# (pid, ports, cluster id) while it runs.
_STATE = "broker.json"


def _running(folder: Path) -> dict[str, int | str] | None:
    """The recorded broker of ``folder`` if its JVM still runs (the recorded pid running
    ``kafka.Kafka`` on this folder's properties), else None."""
    try:
        state = json.loads((folder / _STATE).read_text())
        cmdline = Path(f"/proc/{state['pid']}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, KeyError):
        return None
    if str(folder / _PROPERTIES).encode() not in cmdline:
        return None  # the pid is another process's now
    return dict(state)


def _create_topic(bootstrap_servers: str, topic: str) -> bool:
    """Create ``topic`` (3 partitions) unless it exists; whether it was created."""
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=30_000)
    try:
        if topic in admin.list_topics():
            return False
        admin.create_topics([NewTopic(topic, 3, 1)])
        return True
    finally:
        admin.close()


def _start_command(folder: Path, port: int) -> tuple[str, str]:
    state = _running(folder)
    if state is not None:
        servers = f"127.0.0.1:{state['port']}"
        return f"the Kafka broker of {folder} is already running (pid {state['pid']})", servers
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / _STATE).exists() and (folder / "data" / "meta.properties").exists():
        # started and stopped before: the same ports and log folder, its topics kept
        state = json.loads((folder / _STATE).read_text())
        broker = KafkaBroker(
            int(state["port"]),
            int(state["controller_port"]),
            str(state["cluster_id"]),
            folder,
            BROKER_JARS,
            _launch(folder, BROKER_JARS, detached=True),
        )
        try:
            _wait_until_up(broker, folder / _OUTPUT)
        except BaseException:
            broker.stop()
            raise
    else:
        broker = start(folder, port=port, detached=True)
    (folder / _STATE).write_text(
        json.dumps(
            {
                "pid": broker.process.pid,
                "port": broker.port,
                "controller_port": broker.controller_port,
                "cluster_id": broker.cluster_id,
            }
        )
    )
    return f"started a Kafka broker (pid {broker.process.pid})", broker.bootstrap_servers


def _stop_command(folder: Path) -> str:
    state = _running(folder)
    if state is None:
        return f"no Kafka broker of {folder} is running"
    pid = int(state["pid"])
    os.kill(pid, signal.SIGTERM)  # Kafka's clean shutdown
    deadline = time.monotonic() + 60
    while _exists(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return f"the Kafka broker (pid {pid}) did not stop in 60 s: killed"
        time.sleep(0.2)
    return f"stopped the Kafka broker (pid {pid})"


def _exists(pid: int) -> bool:
    """Whether process ``pid`` is still there (exiting, or exited and not yet reaped, counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--home", help="default: STATECORE_HOME, else ./.statecore")
    parser.add_argument("--port", type=int, default=9092, help="the client port (default 9092)")
    parser.add_argument("--topic", default="clicks", help="created when missing (default clicks)")
    args = parser.parse_args(argv)
    home = Path(args.home or os.environ.get("STATECORE_HOME") or ".statecore").absolute()
    folder = home / "kafka"
    if args.action == "stop":
        print(f"statecore: {_stop_command(folder)}")
        return 0
    what, servers = _start_command(folder, args.port)
    created = _create_topic(servers, args.topic)
    conn = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": servers}})
    print(
        f"statecore: {what} on {servers}; its files and log (broker.log) are in {folder}\n"
        f"  bootstrap servers: {servers}\n"
        f"  topic {args.topic!r}: {'created, 3 partitions' if created else 'there'}\n"
        "Point the streaming_kafka DAG at it: trigger it with the params\n"
        f'  {{"bootstrap_servers": "{servers}", "topic": "{args.topic}"}}\n'
        "or give Airflow the connection kafka_default before `make up`:\n"
        f"  export AIRFLOW_CONN_KAFKA_DEFAULT='{conn}'\n"
        "`make kafka-down` stops it."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
