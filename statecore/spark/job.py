"""What one keyed run is asked to do (:class:`KeyedJob`) and what it did (:class:`KeyedRun`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from statecore.backends.registry import BackendParameters
from statecore.catalog import CheckpointRecord
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.runtime.functions import KeyedProcessFunction
from statecore.runtime.lateness import LateData
from statecore.runtime.side_outputs import OutputTag
from statecore.runtime.vectorized import KeyedBatchFunction
from statecore.snapshot.changelog import ChangelogConfig
from statecore.snapshot.output import OutputTable, output_table_key
from statecore.spark.executor import Process, TaskSpec
from statecore.spark.named_outputs import LATE_DATA, SIDE_OUTPUT, NamedOutput
from statecore.ttl.time import TtlTimeProvider

__all__ = ["KeyedJob", "KeyedRun", "SideOutput", "SideOutputs", "named_outputs"]


@dataclass(frozen=True, kw_only=True)
class SideOutput:
    """Where a side output's values go: the Delta table ``table`` (a path or URI), each value
    a row of ``schema`` (a tuple in its fields' order), committed exactly once with the
    checkpoint, as the main output is."""

    table: str
    schema: T.StructType

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or not self.table:
            raise ConfigError(f"SideOutput: table must be a Delta table path, not {self.table!r}")
        if not isinstance(self.schema, T.StructType):
            raise ConfigError(
                f"SideOutput for {self.table!r}: schema must be a pyspark StructType, not "
                f"{type(self.schema).__name__}"
            )


SideOutputs = Mapping[OutputTag | str, SideOutput | None]
"""``side_outputs=`` of a run: per tag (or its name), its table, or ``None`` to drop its values."""


def side_output_tables(
    side_outputs: SideOutputs | None, *, job: str
) -> tuple[dict[str, SideOutput], frozenset[str]]:
    """The side outputs by name with a table, and the names whose values are dropped;
    :class:`~statecore.errors.ConfigError` for a bad tag, a reserved name or a table given
    twice."""
    tables: dict[str, SideOutput] = {}
    dropped: set[str] = set()
    for tag, output in (side_outputs or {}).items():
        if not isinstance(tag, OutputTag | str):
            raise ConfigError(
                f"job {job!r}: side_outputs keys are OutputTags or their names, not {tag!r}"
            )
        name = OutputTag.of(tag).name
        if name in tables or name in dropped:
            raise ConfigError(f"job {job!r}: side output {name!r} is given twice")
        if name == "late-data":
            raise ConfigError(
                f"job {job!r}: side output name 'late-data' is the late-data table's; late "
                "records go there with late_output_table="
            )
        if output is None:
            dropped.add(name)
        elif isinstance(output, SideOutput):
            tables[name] = output
        else:
            raise ConfigError(
                f"job {job!r}: side output {name!r}: give a SideOutput(table=..., schema=...) "
                f"or None (drop its values), not {output!r}"
            )
    return tables, frozenset(dropped)


@dataclass(frozen=True)
class KeyedRun:
    """The outcome of one run: its output rows, the completed checkpoint, whether it replayed."""

    read_output: Callable[[], DataFrame] = field(repr=False)
    """Builds :attr:`output` (when first asked for: a stream's micro-batch never reads it)."""
    checkpoint: CheckpointRecord
    replayed: bool
    records: int
    restore: dict[str, int] = field(default_factory=dict)
    """Summed over tasks: how the backends got their state (e.g. ``reused_key_groups``,
    ``ingested_rows``), and ``tasks``."""
    late_rows: int = 0
    """Records at or below the watermark the run started from: processed by the function
    (``late_data="process"``, the default), written to the late-data table, or dropped
    (Spark's ``numRowsDroppedByWatermark``)."""
    next_processing_timer: int | None = None
    """When the earliest pending processing-time timer is due (epoch ms; ``None``: none, or
    not known on a replay)."""
    persisted: DataFrame | None = field(default=None, repr=False)
    """The persisted result the output is read from (without an output table)."""

    @functools.cached_property
    def output(self) -> DataFrame:
        """The run's output rows: Spark's result (persisted; :meth:`unpersist` it when done),
        or with an output table this checkpoint's rows read from the table."""
        return self.read_output()

    def unpersist(self) -> None:
        """Release the persisted result (``output.unpersist()`` would not: the output is a
        projection of it, which Spark's cache does not match)."""
        if self.persisted is not None:
            self.persisted.unpersist()

    @property
    def watermark(self) -> int | None:
        """The event-time watermark (epoch ms) the checkpoint completed with."""
        return self.checkpoint.watermark


@dataclass(frozen=True, kw_only=True)
class KeyedJob:
    """What one run of either API is asked to do: the arguments of :func:`keyed_process`, plus
    how a task processes its batches (per record, or in keyed batches)."""

    key: str
    function: KeyedProcessFunction | KeyedBatchFunction
    process: Callable[[TaskSpec], Process]
    output_schema: T.StructType
    job: str
    checkpoint_id: int
    operator: str = "main"
    parallelism: int | None = None
    max_parallelism: int | None = None
    order_by: list[str] | None = None
    backend: BackendParameters = field(default_factory=BackendParameters)
    config: StatecoreConfig | None = None
    event_time: str | None = None
    allowed_lateness: timedelta = timedelta(0)
    end_of_input: bool = False
    """The input is bounded and this run ends it: the watermark ends at ``MAX_WATERMARK``."""
    processing_timers_at_end: bool = False
    """With ``end_of_input``: every processing-time timer fires at the end (Flink's BATCH)."""
    processing_time: TtlTimeProvider | None = None
    restore_from: str | None = None
    force_restore: bool = False
    output_table: str | None = None
    input_fingerprint: str | Mapping[str, Any] | None = None
    changelog: ChangelogConfig | None = None
    late_output_table: str | None = None
    side_outputs: SideOutputs | None = None
    """Per side output (:class:`~statecore.runtime.side_outputs.OutputTag` or name): its
    :class:`SideOutput` table, or ``None`` to drop its values."""
    late_data: LateData | str | None = None
    """``process``, ``drop`` or ``table`` (:class:`~statecore.runtime.lateness.LateData`);
    ``None``: ``table`` with a ``late_output_table``, else ``process``."""
    stream: bool = False
    """A micro-batch of a stream: Spark's watermark rule (see :mod:`statecore.spark.keyed`)."""
    retain_checkpoints: int | None = None
    live_lookups: bool = False
    """Tasks serve live lookups of their state (:mod:`statecore.runtime.live`)."""
    warm_hosts: bool = False
    """A stream's tasks run in their subtasks' warm state hosts (:mod:`statecore.spark.host`)."""


def named_outputs(
    job: KeyedJob, *, late_sink: OutputTable | None, late_schema: pa.Schema
) -> tuple[list[tuple[NamedOutput, OutputTable]], frozenset[str]]:
    """The run's output tables besides the main one (the late-data table, then the side
    outputs'), and the side outputs whose values are dropped; :class:`ConfigError` when two of
    the run's outputs, the main one included, name one table."""
    side_tables, dropped = side_output_tables(job.side_outputs, job=job.job)
    named: list[tuple[NamedOutput, OutputTable]] = []
    if late_sink is not None:
        late = NamedOutput(name=LATE_DATA, kind=LATE_DATA, table=late_sink.uri, schema=late_schema)
        named.append((late, late_sink))
    for name, side in side_tables.items():
        arrow = to_arrow_schema(side.schema, timezone="UTC")
        app_id = f"statecore:{job.job}/{job.operator}/side/{name}"
        named.append(
            (
                NamedOutput(name=name, kind=SIDE_OUTPUT, table=side.table, schema=arrow),
                OutputTable(side.table, arrow, app_id=app_id),
            )
        )
    seen = set() if job.output_table is None else {output_table_key(job.output_table)}
    for output, _ in named:
        key = output_table_key(output.table)
        if key in seen:
            raise ConfigError(
                f"job {job.job!r}: the table {output.table} is given for two outputs of the run "
                "(its output, late-data table and side outputs each need their own table)"
            )
        seen.add(key)
    return named, frozenset(dropped)
