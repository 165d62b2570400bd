"""PyFlink's connectors (``pyflink.datastream.connectors``): the file source and sink
(``.file_system``), the Kafka source (``.kafka``), and statecore's Delta output table
(``.delta``, no PyFlink counterpart)."""

from statecore.pyflink.datastream.connectors.delta import DeltaSink
from statecore.pyflink.datastream.connectors.file_system import (
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from statecore.pyflink.datastream.connectors.kafka import (
    KafkaOffsetsInitializer,
    KafkaSource,
    KafkaSourceBuilder,
)

__all__ = [
    "DeltaSink",
    "FileSink",
    "FileSource",
    "KafkaOffsetsInitializer",
    "KafkaSource",
    "KafkaSourceBuilder",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
]
