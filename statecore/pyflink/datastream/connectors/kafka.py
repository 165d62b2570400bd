"""PyFlink's Kafka source (``pyflink.datastream.connectors.kafka``), read by Spark's Kafka source:
``KafkaSource.builder().set_bootstrap_servers(...).set_topics(...).set_group_id(...)
.set_starting_offsets(KafkaOffsetsInitializer.earliest())
.set_value_only_deserializer(SimpleStringSchema()).build()`` gives each record's value as a
string, its Kafka timestamp as the record timestamp (the event time unless a timestamp assigner
says otherwise, as in Flink). Spark keeps the offsets in the query's checkpoint location, not in
the consumer group: ``set_group_id`` names nothing statecore commits. ``set_bounded(
KafkaOffsetsInitializer.latest())`` reads up to the offsets at the start and ends (a batch, or a
stream that ends its input). Other deserializers and offsets by timestamp raise
:class:`~statecore.errors.PyFlinkUnsupportedError`."""

from __future__ import annotations

from typing import Any

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.common.serialization import SimpleStringSchema

__all__ = ["KafkaOffsetsInitializer", "KafkaSource", "KafkaSourceBuilder"]


class KafkaOffsetsInitializer:
    """Where reading starts (or, bounded, ends): Spark's ``earliest`` or ``latest``."""

    def __init__(self, spark_offsets: str) -> None:
        self.spark_offsets = spark_offsets

    @staticmethod
    def earliest() -> KafkaOffsetsInitializer:
        return KafkaOffsetsInitializer("earliest")

    @staticmethod
    def latest() -> KafkaOffsetsInitializer:
        return KafkaOffsetsInitializer("latest")

    @staticmethod
    def committed_offsets(*args: Any) -> KafkaOffsetsInitializer:
        raise PyFlinkUnsupportedError(
            "KafkaOffsetsInitializer.committed_offsets: Spark keeps a query's offsets in its "
            "checkpoint location; start with earliest() or latest(), or from a savepoint's "
            f"offsets (statecore.spark.savepoint_offsets) ({COMING_FROM_PYFLINK})"
        )

    @staticmethod
    def timestamp(timestamp: int) -> KafkaOffsetsInitializer:
        raise PyFlinkUnsupportedError(
            "KafkaOffsetsInitializer.timestamp: use earliest() and filter by the timestamp "
            f"assigner's time ({COMING_FROM_PYFLINK})"
        )


class KafkaSource:
    """The records of ``topics`` on ``bootstrap_servers``, values as strings."""

    def __init__(
        self,
        bootstrap_servers: str,
        topics: tuple[str, ...],
        group_id: str | None,
        starting: KafkaOffsetsInitializer,
        bounded: KafkaOffsetsInitializer | None,
        properties: dict[str, str],
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topics = topics
        self.group_id = group_id
        self.starting = starting
        self.stopping = bounded
        self.properties = properties

    @property
    def bounded(self) -> bool:
        return self.stopping is not None

    @staticmethod
    def builder() -> KafkaSourceBuilder:
        return KafkaSourceBuilder()


class KafkaSourceBuilder:
    def __init__(self) -> None:
        self._servers: str | None = None
        self._topics: tuple[str, ...] = ()
        self._group_id: str | None = None
        self._starting = KafkaOffsetsInitializer.earliest()
        self._bounded: KafkaOffsetsInitializer | None = None
        self._properties: dict[str, str] = {}
        self._deserializer: Any = None

    def set_bootstrap_servers(self, bootstrap_servers: str) -> KafkaSourceBuilder:
        self._servers = bootstrap_servers
        return self

    def set_topics(self, *topics: str) -> KafkaSourceBuilder:
        self._topics = topics
        return self

    def set_topic_pattern(self, topic_pattern: str) -> KafkaSourceBuilder:
        raise PyFlinkUnsupportedError(
            f"KafkaSource topic patterns: name the topics with set_topics ({COMING_FROM_PYFLINK})"
        )

    def set_group_id(self, group_id: str) -> KafkaSourceBuilder:
        self._group_id = group_id
        return self

    def set_client_id_prefix(self, prefix: str) -> KafkaSourceBuilder:
        return self

    def set_starting_offsets(self, initializer: KafkaOffsetsInitializer) -> KafkaSourceBuilder:
        self._starting = initializer
        return self

    def set_bounded(
        self, stopping_offsets_initializer: KafkaOffsetsInitializer
    ) -> KafkaSourceBuilder:
        if stopping_offsets_initializer.spark_offsets != "latest":
            raise PyFlinkUnsupportedError(
                "KafkaSource.set_bounded: statecore stops at KafkaOffsetsInitializer.latest() "
                f"(the offsets when the job starts) ({COMING_FROM_PYFLINK})"
            )
        self._bounded = stopping_offsets_initializer
        return self

    def set_unbounded(self, stopping_offsets_initializer: Any) -> KafkaSourceBuilder:
        raise PyFlinkUnsupportedError(
            "KafkaSource.set_unbounded with stopping offsets: a stream reads on; cancel the job "
            f"or use set_bounded(KafkaOffsetsInitializer.latest()) ({COMING_FROM_PYFLINK})"
        )

    def set_value_only_deserializer(self, deserialization_schema: Any) -> KafkaSourceBuilder:
        if not isinstance(deserialization_schema, SimpleStringSchema):
            raise PyFlinkUnsupportedError(
                f"KafkaSource deserializer {deserialization_schema!r}: statecore reads values "
                "with SimpleStringSchema() (parse JSON or CSV in a map) "
                f"({COMING_FROM_PYFLINK})"
            )
        self._deserializer = deserialization_schema
        return self

    def set_property(self, key: str, value: str) -> KafkaSourceBuilder:
        self._properties[key] = value
        return self

    def set_properties(self, props: dict[str, str]) -> KafkaSourceBuilder:
        self._properties.update(props)
        return self

    def build(self) -> KafkaSource:
        if not self._servers or not self._topics or self._deserializer is None:
            raise ValueError(
                "KafkaSource needs set_bootstrap_servers, set_topics and "
                "set_value_only_deserializer"
            )
        return KafkaSource(
            self._servers, self._topics, self._group_id, self._starting, self._bounded,
            dict(self._properties),
        )  # fmt: skip
