"""One Kafka broker per test session (:mod:`scripts.kafka_broker`, the broker ``make kafka``
starts: KRaft, on 127.0.0.1), and a fresh topic per test."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
from kafka.admin import NewTopic

from scripts import kafka_broker as kafka_broker_module
from scripts.kafka_broker import KafkaBroker
from tests.groups import jvm_group_only

_topics = itertools.count()


@pytest.fixture(scope="session")
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBroker]:
    """The session's broker, stopped at the session's end."""
    jvm_group_only(request)
    broker = kafka_broker_module.start(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def new_topic(kafka_broker: KafkaBroker) -> Callable[[int], str]:
    """``new_topic(partitions)``: a topic of its own for the test, created on the broker."""

    def create(partitions: int = 3) -> str:
        name = f"t{next(_topics)}"
        admin = kafka_broker.admin()
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()
        return name

    return create
