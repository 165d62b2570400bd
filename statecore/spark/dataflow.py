"""``run_dataflow``: a source, a stateless stage and one keyed stage, run as a statecore job: the
DataStream layer (:mod:`statecore.pyflink.datastream`) plans a ported PyFlink job into a
:class:`Dataflow` and runs it here. No second runtime: the keyed stage is
:func:`~statecore.spark.keyed.keyed_process` (a batch, or a bounded collection) or
:func:`~statecore.spark.stream.keyed_stream` (a stream), so the job's checkpoints, state and
output table are those of any statecore job.

The source gives ``(element, record timestamp)`` pairs: the rows of a collection (pickled bytes),
the lines of text files (Spark's text source, ``readStream`` for a stream) or the values of
Kafka records as strings with their Kafka timestamps (Spark's Kafka source). A ``mapInArrow``
stage turns them into ``(key, value, ts, seq)`` rows with :attr:`Dataflow.prepare` (the steps
before ``key_by``, the key, the event time); ``seq`` numbers a task's rows in source order and
orders each key's records in the keyed stage.

A stream writes its output to a Delta table; :attr:`Dataflow.on_output` gets the rows of each
checkpoint once it completed, in checkpoint order (Flink's two-phase commit: printed or written
exactly once). A bounded source in a stream runs the query with the ``availableNow`` trigger,
then one run on no records with ``end_of_input`` fires every timer, as Flink's
``MAX_WATERMARK`` at the end of a bounded source does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import islice
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.runtime.functions import KeyedProcessFunction
from statecore.snapshot.output_rows import checkpoint_commits, checkpoint_output_uris
from statecore.snapshot.storage import table_filesystem
from statecore.spark.job import SideOutput
from statecore.spark.keyed import keyed_process
from statecore.spark.stream import every_task_runs, keyed_stream

__all__ = ["DEFAULT_OPERATOR", "Dataflow", "SideSink", "Source", "check_operator", "run_dataflow"]

DEFAULT_OPERATOR = "main"
"""The keyed operator's name when the job gives none (``keyed_process``'s default)."""

log = logging.getLogger(__name__)

_KEY_TYPES = {"string": T.StringType(), "long": T.LongType(), "binary": T.BinaryType()}
_ARROW_KEYS = {"string": pa.string(), "long": pa.int64(), "binary": pa.binary()}
_ROWS_PER_BATCH = 10_000


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where the elements come from: ``rows`` (pickled elements), ``text`` files under
    ``paths`` or ``kafka`` (``options``: Spark's Kafka source options)."""

    kind: str
    rows: list[bytes] = field(default_factory=list, repr=False)
    paths: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    bounded: bool = True


OnOutput = Callable[[int, pa.Table], None]
"""Gets a completed checkpoint's rows of an output, in checkpoint order."""


@dataclass(frozen=True, kw_only=True)
class SideSink:
    """A side output of the keyed stage (PyFlink's ``get_side_output``): the values its
    function emits to side output ``name`` (rows of ``schema``) go to the Delta table
    ``table`` (``None``: the job's own, ``<warehouse>/<job>/side_outputs/<name>``), committed
    with each checkpoint as the main output is; ``on_output`` gets each completed checkpoint's
    rows, after the main output's of the same checkpoint."""

    name: str
    schema: pa.Schema
    table: str | None = None
    on_output: OnOutput | None = None


PrepareFunction = Callable[
    [Iterable[tuple[Any, int | None]], int, int | None], Iterator[tuple[Any, ...]]
]


@dataclass(frozen=True, kw_only=True)
class Dataflow:
    """A planned job: its source, the stateless stage, the keyed stage and the output."""

    job: str
    operator: str = DEFAULT_OPERATOR
    """The keyed operator's name (PyFlink's ``uid``): its state is checkpointed under it and a
    restore matches it."""
    source: Source
    prepare: PrepareFunction
    """``(element, record timestamp)`` pairs, the task's partition and the number of partitions
    (``None`` in a stream: Spark decides it per micro-batch) to ``(key, pickled value, event
    time, seq)`` rows."""
    key_type: str
    """``string``, ``long`` or ``binary``."""
    function: KeyedProcessFunction
    output_schema: pa.Schema
    stream: bool
    """A Structured Streaming query (else one run that ends the input)."""
    event_time: bool = False
    allowed_lateness: timedelta = timedelta(0)
    parallelism: int | None = None
    max_parallelism: int | None = None
    backend: str = "heap"
    trigger_interval: timedelta | None = None
    output_table: str | None = None
    """A Delta table for the output (a stream without one writes to the job's own)."""
    text_output: str | None = None
    """A batch without an output table: the ``text`` column written as text files here."""
    on_output: OnOutput | None = None
    """Gets each completed checkpoint's output rows (without ``output_table``)."""
    side_outputs: tuple[SideSink, ...] = ()
    """The side outputs the job reads, each to its own table."""
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)
    """Set to stop a stream (``cancel()`` of PyFlink's ``JobClient``)."""
    more_inputs: tuple[tuple[Source, PrepareFunction], ...] = ()
    """Further sources, each with its own stateless stage, unioned with the first before the
    keyed stage (PyFlink's ``union`` and ``connect``: their ``prepare`` numbers the rows of
    each input apart)."""
    processing_timers_at_end: bool = False
    """A batch whose end fires every processing-time timer too (PyFlink's ``BATCH`` mode)."""

    @property
    def inputs(self) -> tuple[tuple[Source, PrepareFunction], ...]:
        return ((self.source, self.prepare), *self.more_inputs)

    @property
    def bounded(self) -> bool:
        return all(source.bounded for source, _ in self.inputs)


def _prepared_schema(key_type: str) -> T.StructType:
    return T.StructType(
        [
            T.StructField("key", _KEY_TYPES[key_type]),
            T.StructField("value", T.BinaryType()),
            T.StructField("ts", T.LongType()),
            T.StructField("seq", T.LongType()),
        ]
    )


def _prepare_task(
    flow: Dataflow, prepare: PrepareFunction, partitions: int | None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    schema = pa.schema(
        [
            pa.field("key", _ARROW_KEYS[flow.key_type]),
            pa.field("value", pa.binary()),
            pa.field("ts", pa.int64()),
            pa.field("seq", pa.int64()),
        ]
    )

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition = TaskContext.get().partitionId()  # type: ignore[union-attr]
        records = (
            pair
            for batch in batches
            for pair in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
        )
        rows = prepare(records, partition, partitions)
        while chunk := list(islice(rows, _ROWS_PER_BATCH)):
            columns = [pa.array(c, type=f.type) for c, f in zip(zip(*chunk), schema)]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    return run


_GLOB_SPECIALS = "\\*?[]{},"


def _text_stream(spark: SparkSession, path: str) -> DataFrame:
    """The lines of the files in folder ``path`` as a stream, or of file ``path``: Spark's file
    stream source takes a folder or a glob, so a file is read through a glob that matches only
    it (its name with one letter as a character class, every glob character escaped)."""
    fs, local = table_filesystem(path)
    if fs.get_file_info(local).type != pafs.FileType.File:
        return spark.readStream.text(path)
    escaped = [f"\\{c}" if c in _GLOB_SPECIALS else c for c in path]
    for i in range(len(path) - 1, path.rfind("/"), -1):
        if path[i].isalnum():
            escaped[i] = f"[{path[i]}]"
            return spark.readStream.text("".join(escaped))
    raise ConfigError(
        f"text file {path!r}: a stream reads a file whose name has a letter or digit; put it "
        "in a folder and read the folder"
    )


def check_operator(catalog: Catalog, job: str, operator: str) -> None:
    """A run of ``job`` whose keyed operator is ``operator``: a :class:`ConfigError` when the
    job's checkpointed state belongs to other operators only, as Flink refuses a restore whose
    state maps to no operator of the new program (state is matched by the operator's uid)."""
    if not catalog.has_job(job):
        return
    owners = sorted({s.operator for s in catalog.list_states(job)})
    if owners and operator not in owners:
        raise ConfigError(
            f"job {job!r}: its checkpointed state belongs to operator {', '.join(owners)!r}, "
            f"this run's keyed operator is {operator!r}: no state would be restored. Give the "
            "keyed operator the uid its state was checkpointed under (uid(...)), or run a new "
            "job"
        )


def _spark_schema(schema: pa.Schema) -> T.StructType:
    return T.StructType([T.StructField(f.name, from_arrow_type(f.type)) for f in schema])


class _Run:
    """One execution of a :class:`Dataflow`."""

    def __init__(self, flow: Dataflow, spark: SparkSession | None) -> None:
        self.flow = flow
        session = spark or SparkSession.getActiveSession()
        if session is None:
            from statecore.spark.session import build_session

            session = build_session()
        self.spark: SparkSession = session
        self.config = StatecoreConfig.resolve()

    def source(self, stream: bool, source: Source | None = None) -> DataFrame:
        source = self.flow.source if source is None else source
        spark = self.spark
        if source.kind == "rows":
            rows = [(r, None) for r in source.rows]
            return spark.createDataFrame(rows, "element binary, record_ts long")
        if source.kind == "text":
            if stream:
                if len(source.paths) != 1:
                    raise ConfigError(
                        f"job {self.flow.job!r}: a stream reads one file or one folder of "
                        "files, not "
                        f"{list(source.paths)}"
                    )
                df = _text_stream(spark, source.paths[0])
            else:
                df = spark.read.text(list(source.paths))
            return df.select(
                F.col("value").alias("element"), F.lit(None).cast("long").alias("record_ts")
            )
        reader: Any = (spark.readStream if stream else spark.read).format("kafka")
        for key, value in source.options.items():
            reader = reader.option(key, value)
        if not stream:
            reader = reader.option("endingOffsets", "latest")
        loaded: DataFrame = reader.load()
        return loaded.select(
            F.col("value").cast("string").alias("element"),
            F.unix_millis(F.col("timestamp")).alias("record_ts"),
        )

    def prepared(self, df: DataFrame, prepare: PrepareFunction | None = None) -> DataFrame:
        partitions = None if df.isStreaming else df.rdd.getNumPartitions()
        task = _prepare_task(
            self.flow, self.flow.prepare if prepare is None else prepare, partitions
        )
        return df.mapInArrow(task, _prepared_schema(self.flow.key_type))

    def prepared_inputs(self, stream: bool) -> DataFrame:
        """Every input's prepared rows, unioned: one keyed input."""
        frames = [self.prepared(self.source(stream, s), p) for s, p in self.flow.inputs]
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        return union

    def side_table(self, side: SideSink) -> str:
        warehouse = self.config.warehouse.rstrip("/")
        return side.table or f"{warehouse}/{self.flow.job}/side_outputs/{side.name}"

    def options(self) -> dict[str, Any]:
        flow = self.flow
        sides = {
            s.name: SideOutput(table=self.side_table(s), schema=_spark_schema(s.schema))
            for s in flow.side_outputs
        }
        return {
            "side_outputs": sides or None,
            "key": "key",
            "function": flow.function,
            "output_schema": _spark_schema(flow.output_schema),
            "job": flow.job,
            "operator": flow.operator,
            "parallelism": flow.parallelism,
            "max_parallelism": flow.max_parallelism,
            "order_by": ["seq"],
            "backend": flow.backend,
            "event_time": "ts" if flow.event_time else None,
            "allowed_lateness": flow.allowed_lateness,
        }

    def next_checkpoint_id(self) -> int:
        job = self.flow.job
        with Catalog.connect(self.config.catalog_url) as catalog:
            check_operator(catalog, job, self.flow.operator)
            latest = catalog.highest_completed_id(job) if catalog.has_job(job) else None
        return 0 if latest is None else latest + 1

    def completed(self) -> list[int]:
        with Catalog.connect(self.config.catalog_url) as catalog:
            records = catalog.list_checkpoints(
                self.flow.job, status=CheckpointStatus.COMPLETED, with_tables=False
            )
        return [r.checkpoint_id for r in records]

    def run_once(
        self,
        prepared: DataFrame,
        *,
        output_table: str | None,
        changelog: bool,
        deliver: bool = True,
        processing_timers_at_end: bool = False,
    ) -> int:
        """One run that ends the input; with ``deliver``, its outputs handed on (the main
        output's rows, then each side output's)."""
        flow = self.flow
        run = keyed_process(
            prepared,
            checkpoint_id=self.next_checkpoint_id(),
            end_of_input=True,
            processing_timers_at_end=processing_timers_at_end,
            output_table=output_table,
            changelog=changelog,
            **self.options(),
        )
        checkpoint = run.checkpoint.checkpoint_id
        if not deliver:
            return checkpoint
        try:
            if output_table is not None:
                pass  # the rows are in the table (a DeltaSink)
            elif flow.text_output is not None:
                run.output.select("text").write.mode("append").text(flow.text_output)
            elif flow.on_output is not None:
                rows = run.output.collect()
                names = flow.output_schema.names
                table = pa.Table.from_pylist(
                    [r.asDict() for r in rows], schema=flow.output_schema
                ).select(names)
                flow.on_output(checkpoint, table)
        finally:
            run.unpersist()
        for side in flow.side_outputs:
            if side.on_output is not None:
                side_rows = _checkpoint_rows(self.side_table(side), checkpoint, side.schema)
                if side_rows is not None:
                    side.on_output(checkpoint, side_rows)
        return checkpoint

    def batch(self) -> list[int]:
        if not self.flow.bounded:
            raise ConfigError(
                f"job {self.flow.job!r}: a batch needs a bounded source (files read once, a "
                "Kafka source with an end)"
            )
        prepared = self.prepared_inputs(stream=False)
        self.run_once(
            prepared,
            output_table=self.flow.output_table,
            changelog=False,
            processing_timers_at_end=self.flow.processing_timers_at_end,
        )
        return self.completed()

    def stream(self) -> list[int]:
        flow = self.flow
        with Catalog.connect(self.config.catalog_url) as catalog:
            check_operator(catalog, flow.job, flow.operator)
        table = flow.output_table or f"{self.config.warehouse.rstrip('/')}/{flow.job}/output"
        trigger: dict[str, Any] | None = None
        if flow.bounded:
            trigger = {"availableNow": True}
        elif flow.trigger_interval is not None:
            ms = int(flow.trigger_interval / timedelta(milliseconds=1))
            trigger = {"processingTime": f"{ms} milliseconds"}
        query = keyed_stream(
            self.prepared_inputs(stream=True),
            checkpoint_location=f"{self.config.home.rstrip('/')}/dataflow/{flow.job}/query",
            trigger=trigger,
            output_table=table,
            query_name=flow.job,
            **self.options(),
        )
        sinks = [] if flow.output_table else [(table, flow.output_schema, flow.on_output)]
        sinks += [(self.side_table(s), s.schema, s.on_output) for s in flow.side_outputs]
        outputs = _Outputs(sinks)
        while not query.awaitTermination(1):
            outputs.deliver()
            if flow.cancel.is_set():
                query.stop()
        error = query.exception()
        if error is not None:
            raise ConfigError(f"job {flow.job!r}: its query failed: {error}")
        if flow.bounded and not flow.cancel.is_set():
            self.end_input(table)
        outputs.deliver()
        return self.completed()

    def end_input(self, table: str) -> None:
        """One run on no records with ``end_of_input``: every subtask's timers fire. Spark must
        run the tasks of an empty shuffle, as for each micro-batch of a stream."""
        with every_task_runs(self.spark):
            empty = self.spark.createDataFrame([], _prepared_schema(self.flow.key_type))
            self.run_once(empty, output_table=table, changelog=True, deliver=False)


def _checkpoint_rows(table: str, checkpoint: int, schema: pa.Schema) -> pa.Table | None:
    """The rows checkpoint ``checkpoint`` committed to ``table`` (``None``: none)."""
    tables = []
    for file in sorted(checkpoint_output_uris(table, checkpoint)):
        fs, path = table_filesystem(file)
        tables.append(pq.read_table(path, filesystem=fs))
    return pa.concat_tables(tables).select(schema.names) if tables else None


class _Outputs:
    """A stream's output tables (the main one, then the side outputs'), each completed
    checkpoint's rows handed on once, found through each table's Delta log
    (:mod:`statecore.snapshot.output_rows`): per checkpoint, the main output's first."""

    def __init__(self, sinks: list[tuple[str, pa.Schema, OnOutput | None]]) -> None:
        self.sinks = [(t, schema, on) for t, schema, on in sinks if on is not None]
        self.delivered: list[set[int]] = [set() for _ in self.sinks]
        self._since = [0 for _ in self.sinks]

    def deliver(self) -> None:
        pending: list[tuple[int, int, pa.Table]] = []
        for i, (table, schema, _) in enumerate(self.sinks):
            for commit in list(checkpoint_commits(table, since=self._since[i])):
                self._since[i] = commit.version + 1
                if commit.checkpoint_id in self.delivered[i]:
                    continue
                rows = _checkpoint_rows(table, commit.checkpoint_id, schema)
                if rows is not None:
                    pending.append((commit.checkpoint_id, i, rows))
                self.delivered[i].add(commit.checkpoint_id)
        for checkpoint, i, rows in sorted(pending, key=lambda p: (p[0], p[1])):
            on_output = self.sinks[i][2]
            assert on_output is not None
            on_output(checkpoint, rows)


def run_dataflow(flow: Dataflow, spark: SparkSession | None = None) -> list[int]:
    """Run ``flow`` and return the ids of the job's completed checkpoints when it ends: after
    its one run (a batch), when its bounded source is read and its input ended, or when
    ``flow.cancel`` is set (a stream)."""
    run = _Run(flow, spark)
    return run.stream() if flow.stream else run.batch()
