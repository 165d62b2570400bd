"""PyFlink's file source and sink (``pyflink.datastream.connectors.file_system``), read and
written by Spark: ``FileSource.for_record_stream_format(StreamFormat.text_line_format(), path)``
gives each line of the files under ``path`` as a string (Spark's text source; bounded, or
watched for new files with ``monitor_continuously``), and
``FileSink.for_row_format(path, Encoder.simple_string_encoder())`` writes each element as one
line (the string Flink writes, see :mod:`statecore.pyflink.datastream.formatting`) into part
files under ``path``. Rolling policies and part-file names are Spark's: ``with_rolling_policy``
and ``with_output_file_config`` are accepted and change nothing. Bulk formats raise
:class:`~statecore.errors.PyFlinkUnsupportedError`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.common.serialization import Encoder
from statecore.pyflink.common.time import Time, to_timedelta

__all__ = ["FileSink", "FileSource", "OutputFileConfig", "RollingPolicy", "StreamFormat"]


class StreamFormat:
    """How a file source reads records: ``text_line_format()`` (one string per line)."""

    def __init__(self, charset: str) -> None:
        self.charset = charset

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> StreamFormat:
        return StreamFormat(charset_name)


class FileSource:
    """Lines of the files under ``paths``; unbounded when it monitors them continuously."""

    def __init__(
        self, stream_format: StreamFormat, paths: tuple[str, ...], monitor: timedelta | None
    ) -> None:
        self.stream_format = stream_format
        self.paths = paths
        self.monitor_interval = monitor

    @property
    def bounded(self) -> bool:
        return self.monitor_interval is None

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> FileSourceBuilder:
        if not isinstance(stream_format, StreamFormat):
            raise PyFlinkUnsupportedError(
                f"FileSource format {stream_format!r}: statecore reads text lines "
                f"(StreamFormat.text_line_format()) ({COMING_FROM_PYFLINK})"
            )
        return FileSourceBuilder(stream_format, paths)

    @staticmethod
    def for_bulk_file_format(*args: Any, **kwargs: Any) -> Any:
        raise PyFlinkUnsupportedError(
            "FileSource.for_bulk_file_format: read Parquet, CSV or JSON files with Spark and "
            "keyed_process/keyed_stream, or text lines with "
            f"FileSource.for_record_stream_format(StreamFormat.text_line_format(), path) "
            f"({COMING_FROM_PYFLINK})"
        )


class FileSourceBuilder:
    def __init__(self, stream_format: StreamFormat, paths: tuple[str, ...]) -> None:
        self._format = stream_format
        self._paths = paths
        self._monitor: timedelta | None = None

    def monitor_continuously(self, discovery_interval: Time | timedelta) -> FileSourceBuilder:
        self._monitor = to_timedelta(discovery_interval)
        return self

    def process_static_file_set(self) -> FileSourceBuilder:
        self._monitor = None
        return self

    def set_file_enumerator(self, *args: Any) -> FileSourceBuilder:
        raise PyFlinkUnsupportedError(
            f"FileSource file enumerators: Spark lists the files ({COMING_FROM_PYFLINK})"
        )

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._monitor)


class RollingPolicy:
    """Accepted for PyFlink's builder; Spark writes one part file per task and checkpoint."""

    @staticmethod
    def default_rolling_policy(*args: Any, **kwargs: Any) -> RollingPolicy:
        return RollingPolicy()

    @staticmethod
    def on_checkpoint_rolling_policy() -> RollingPolicy:
        return RollingPolicy()


class OutputFileConfig:
    """Accepted for PyFlink's builder; part files are named by Spark."""

    def __init__(self, part_prefix: str = "part", part_suffix: str = "") -> None:
        self.part_prefix = part_prefix
        self.part_suffix = part_suffix

    @staticmethod
    def builder() -> OutputFileConfigBuilder:
        return OutputFileConfigBuilder()


class OutputFileConfigBuilder:
    def __init__(self) -> None:
        self._config = OutputFileConfig()

    def with_part_prefix(self, prefix: str) -> OutputFileConfigBuilder:
        self._config.part_prefix = prefix
        return self

    def with_part_suffix(self, suffix: str) -> OutputFileConfigBuilder:
        self._config.part_suffix = suffix
        return self

    def build(self) -> OutputFileConfig:
        return self._config


class FileSink:
    """Each element as one line in part files under ``base_path``."""

    def __init__(self, base_path: str, encoder: Encoder) -> None:
        self.base_path = base_path
        self.encoder = encoder

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> FileSinkBuilder:
        if not isinstance(encoder, Encoder):
            raise PyFlinkUnsupportedError(
                f"FileSink encoder {encoder!r}: statecore writes "
                f"Encoder.simple_string_encoder() lines ({COMING_FROM_PYFLINK})"
            )
        return FileSinkBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(*args: Any, **kwargs: Any) -> Any:
        raise PyFlinkUnsupportedError(
            "FileSink.for_bulk_format: sink_to(DeltaSink(path)) writes typed columns (a Delta "
            f"table, Parquet files) ({COMING_FROM_PYFLINK})"
        )


class FileSinkBuilder:
    def __init__(self, base_path: str, encoder: Encoder) -> None:
        self._sink = FileSink(base_path, encoder)

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> FileSinkBuilder:
        return self

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> FileSinkBuilder:
        return self

    def with_bucket_check_interval(self, interval: int) -> FileSinkBuilder:
        return self

    def build(self) -> FileSink:
        return self._sink
