"""PyFlink's ``StreamExecutionEnvironment`` (``pyflink.datastream.stream_execution_environment``):
a job's settings, its sources, and ``execute``, which runs the job as a statecore job on Spark
(:mod:`statecore.spark.pyflink`): its checkpoints in the catalog and its state in SQL, as for
any job (``statecore checkpoints list <job>``, ``statecore sql``).

- ``set_runtime_mode(RuntimeExecutionMode.BATCH)``: one ``keyed_process`` run that ends the
  input (``end_of_input``). As in Flink's batch mode, the watermark stays at its minimum while
  the records run and reaches its maximum at the end, so every event-time timer fires then, and
  ``reduce`` emits one result per key.
- ``STREAMING`` (the default): a source that ends (a collection, a ``FileSource`` without
  ``monitor_continuously``, a ``KafkaSource`` with ``set_bounded``) runs as a stream that
  reads what there is and then ends its input, firing the remaining timers, as Flink does when
  a bounded source finishes; an unbounded source runs a Structured Streaming query
  (``keyed_stream``) until it is cancelled. A collection, already in memory, runs as one
  run with the watermark following the event times.
- ``enable_checkpointing(interval)``: the query's micro-batch trigger (each micro-batch is a
  checkpoint). ``set_parallelism`` and ``set_max_parallelism``: the keyed stage's subtasks and
  key groups. ``set_state_backend``: the heap or RocksDB.

The job's name is ``execute``'s ``job_name`` made a statecore name (letters, digits, ``.``,
``_``, ``-``): ``"Word Count"`` is the job ``Word_Count``, and a second ``execute`` of a named
job continues its checkpoints (a job whose input ended refuses more). Without a name each
execution is a new job, ``Flink_Streaming_Job_<8 hex digits>`` (Flink's name and a fresh job id,
as a Flink job started without a savepoint starts from empty state).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from statecore.errors import COMING_FROM_PYFLINK, ConfigError, PyFlinkUnsupportedError
from statecore.pyflink.common.watermark_strategy import WatermarkStrategy
from statecore.pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from statecore.pyflink.datastream.connectors.kafka import KafkaSource
from statecore.pyflink.datastream.data_stream import DataStream, Plan
from statecore.pyflink.datastream.execution import (
    CollectionSource,
    JobClient,
    JobExecutionResult,
    job_plans,
)
from statecore.pyflink.datastream.execution_mode import RuntimeExecutionMode
from statecore.pyflink.datastream.state_backend import StateBackend

__all__ = [
    "JobClient",
    "JobExecutionResult",
    "StreamExecutionEnvironment",
    "statecore_job_name",
]

DEFAULT_JOB_NAME = "Flink Streaming Job"


def statecore_job_name(job_name: str | None) -> str:
    """The statecore job a PyFlink job name runs as.

    >>> statecore_job_name("Word Count"), statecore_job_name(None)[:20]
    ('Word_Count', 'Flink_Streaming_Job_')
    """
    if job_name is None:
        job_name = f"{DEFAULT_JOB_NAME} {uuid.uuid4().hex[:8]}"
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", job_name.strip())
    name = name.lstrip("._-")[:200]
    if not name:
        raise ConfigError(f"job name {job_name!r}: use letters or digits")
    return name


def _unsupported(what: str, instead: str) -> PyFlinkUnsupportedError:
    return PyFlinkUnsupportedError(f"{what}: {instead} ({COMING_FROM_PYFLINK})")


class StreamExecutionEnvironment:
    """A job's environment: settings, sources, ``execute``."""

    def __init__(self) -> None:
        self._parallelism: int | None = None
        self._max_parallelism: int | None = None
        self._mode = RuntimeExecutionMode.STREAMING
        self._checkpoint_interval: timedelta | None = None
        self._backend = "heap"
        self._plans: list[Plan] = []
        self.spark_session: Any = None
        """The Spark session to run on (default: the active one, else statecore's
        ``build_session()``)."""

    @staticmethod
    def get_execution_environment(configuration: Any = None) -> StreamExecutionEnvironment:
        return StreamExecutionEnvironment()

    # settings
    def set_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        self._parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        return self._parallelism or 1

    def set_max_parallelism(self, max_parallelism: int) -> StreamExecutionEnvironment:
        self._max_parallelism = max_parallelism
        return self

    def get_max_parallelism(self) -> int | None:
        return self._max_parallelism

    def set_runtime_mode(self, execution_mode: RuntimeExecutionMode) -> StreamExecutionEnvironment:
        self._mode = RuntimeExecutionMode(execution_mode)
        return self

    @property
    def _batch(self) -> bool:
        return self._mode is RuntimeExecutionMode.BATCH

    def enable_checkpointing(self, interval: int, mode: Any = None) -> StreamExecutionEnvironment:
        """``interval`` (ms): a stream's micro-batch trigger; each micro-batch is a checkpoint."""
        if interval <= 0:
            raise ConfigError(f"enable_checkpointing({interval}): the interval must be positive")
        self._checkpoint_interval = timedelta(milliseconds=interval)
        return self

    def get_checkpoint_interval(self) -> int:
        interval = self._checkpoint_interval
        return -1 if interval is None else int(interval / timedelta(milliseconds=1))

    def set_state_backend(self, state_backend: StateBackend) -> StreamExecutionEnvironment:
        if not isinstance(state_backend, StateBackend):
            raise _unsupported(
                f"state backend {state_backend!r}",
                "use HashMapStateBackend() or EmbeddedRocksDBStateBackend()",
            )
        self._backend = state_backend.statecore_backend
        return self

    def add_jars(self, *jars_path: str) -> None:
        """Nothing to do: statecore's Spark session carries its JARs (Kafka, Delta)."""

    def add_classpaths(self, *classpaths: str) -> None:
        """Nothing to do (see ``add_jars``)."""

    def add_python_file(self, file_path: str) -> None:
        raise _unsupported(
            "add_python_file", "ship Python files with spark-submit --py-files (docs/jobs.md)"
        )

    def set_python_requirements(self, *args: Any) -> None:
        raise _unsupported(
            "set_python_requirements", "install the packages in the Spark image or venv"
        )

    def set_stream_time_characteristic(self, characteristic: Any) -> None:
        """Nothing to do: event time comes from the watermark strategy."""

    def get_config(self) -> Any:
        raise _unsupported(
            "get_config", "statecore's settings are its config (STATECORE_HOME, docs/jobs.md)"
        )

    # sources
    def from_collection(self, collection: Iterable[Any], type_info: Any = None) -> DataStream:
        return DataStream(
            self,
            Plan(CollectionSource(list(collection)), source_type=type_info, element_type=type_info),
        )

    def from_source(
        self,
        source: Any,
        watermark_strategy: WatermarkStrategy,
        source_name: str,
        type_info: Any = None,
    ) -> DataStream:
        if not isinstance(source, FileSource | KafkaSource):
            raise _unsupported(
                f"from_source({type(source).__name__})",
                "statecore reads FileSource (text lines) and KafkaSource; read other sources "
                "with Spark and run keyed_process or keyed_stream",
            )
        plan = Plan(source, source_name=source_name, watermarks=watermark_strategy)
        return DataStream(self, plan)

    def add_source(self, source_func: Any, source_name: str = "", type_info: Any = None) -> Any:
        raise _unsupported("add_source", "use from_source with a FileSource or KafkaSource")

    def read_text_file(self, file_path: str, charset_name: str = "UTF-8") -> DataStream:
        text = StreamFormat.text_line_format(charset_name)
        return DataStream(self, Plan(FileSource.for_record_stream_format(text, file_path).build()))

    def from_sequence(self, start: int, end: int) -> DataStream:
        return self.from_collection(range(start, end + 1))

    # execution
    def _add_plan(self, plan: Plan) -> None:
        self._plans.append(plan)

    def _sinks(self) -> list[Plan]:
        """The plans of the job's sinks: its main output's and its side outputs' (checked
        into one job by :func:`~statecore.pyflink.datastream.execution.job_plans`)."""
        if not self._plans:
            raise ConfigError("execute(): the job has no sink; add print() or sink_to(...)")
        job_plans(self._plans)
        return list(self._plans)

    def _plan(self) -> Plan:
        """The job's plan (that of its main output)."""
        return job_plans(self._sinks())[0]

    def execute(self, job_name: str | None = None) -> JobExecutionResult:
        """Run the job on Spark (see the module) and return when it ends: at once for a batch
        or a bounded source, when it is cancelled or fails for an unbounded one."""
        from statecore.pyflink.datastream.execution import run

        plans = self._sinks()
        self._plans = []
        return run(self, plans, statecore_job_name(job_name))

    def execute_async(self, job_name: str | None = None) -> JobClient:
        """Start the job and return a ``JobClient`` (``cancel()``, ``get_job_id()``,
        ``wait()``): a stream runs in the background until cancelled."""
        plans = self._sinks()
        self._plans = []
        return JobClient(self, plans, statecore_job_name(job_name))
