"""The local broker of docs/streaming.md ("A local broker"), run as written: ``make kafka``
starts the project's broker in the background on loopback, the page's producer block writes
clicks to its topic ``clicks``, which read back; ``make kafka`` again finds it running;
``make kafka-down`` stops it and no process of it is left. Its port is a free one
(``KAFKA_PORT``, as the page allows), its home a fresh ``STATECORE_HOME``."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from tests.listening import listening

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "streaming.md"


def local_broker_blocks() -> tuple[str, str]:
    """The bash and the Python block of the section "A local broker" of docs/streaming.md."""
    section = DOCS.read_text().split("\n#### A local broker\n", 1)[1].split("\n## ", 1)[0]
    [commands] = re.findall(r"```bash\n(.*?)```", section, re.S)
    [producer] = re.findall(r"```python\n(.*?)```", section, re.S)
    return commands, producer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_documented_path_make_kafka_starts_a_local_broker_and_make_kafka_down_stops_it(
    tmp_path: Path,
) -> None:
    commands, producer = local_broker_blocks()
    start, stop = [shlex.split(line, comments=True) for line in commands.splitlines()]
    assert start == ["make", "kafka"] and stop == ["make", "kafka-down"]
    port = free_port()
    servers = f"127.0.0.1:{port}"
    env = {**os.environ, "STATECORE_HOME": str(tmp_path / "home"), "KAFKA_PORT": str(port)}

    def make(command: list[str]) -> str:
        done = subprocess.run(
            [*command, "-s"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    folder = tmp_path / "home" / "kafka"
    started = make(start)
    pid = json.loads((folder / "broker.json").read_text())["pid"]
    try:
        assert f"started a Kafka broker (pid {pid}) on {servers}" in started
        assert f"bootstrap servers: {servers}" in started
        assert "topic 'clicks': created, 3 partitions" in started
        assert f'{{"bootstrap_servers": "{servers}", "topic": "clicks"}}' in started
        [conn] = re.findall(r"export AIRFLOW_CONN_KAFKA_DEFAULT='(.*)'", started)
        assert json.loads(conn) == {"conn_type": "kafka", "extra": {"bootstrap.servers": servers}}
        assert {host for host, _ in listening(pid)} == {"127.0.0.1"}

        # the page's producer, against this broker
        assert producer.count('"127.0.0.1:9092"') == 1
        exec(compile(producer.replace("127.0.0.1:9092", servers), str(DOCS), "exec"), {})
        consumer = KafkaConsumer(bootstrap_servers=servers, consumer_timeout_ms=10_000)
        partitions = [TopicPartition("clicks", p) for p in range(3)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        records = [next(consumer) for _ in range(100)]
        consumer.close()
        assert sorted(json.loads(r.value)["amount"] for r in records) == [12.5] * 100
        assert {r.key.decode() for r in records} == {f"user-{i}" for i in range(7)}

        again = make(start)
        assert f"already running (pid {pid}) on {servers}" in again
        assert "topic 'clicks': there" in again
    finally:
        stopped = make(stop)
    assert f"stopped the Kafka broker (pid {pid})" in stopped
    assert not alive(pid)
    properties = str(folder / "server.properties").encode()
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and properties in (proc / "cmdline").read_bytes():
                left.append(proc.name)
        except OSError:
            continue
    assert left == []
    assert "no Kafka broker" in make(stop)
