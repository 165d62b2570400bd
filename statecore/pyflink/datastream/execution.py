"""A ported job's :class:`~statecore.pyflink.datastream.data_stream.Plan` as statecore's
:class:`~statecore.spark.dataflow.Dataflow`, run on Spark by ``execute`` (blocking) or
``execute_async`` (a :class:`JobClient`); and the sinks' driver side: ``print()`` writes each
completed checkpoint's lines as Flink's print sink does (``identifier:subtask> `` prefixes
when the parallelism is above 1), a ``FileSink`` gets a part file per checkpoint (a batch: the
part files Spark writes), a ``DeltaSink`` is the job's output table.

- ``BATCH``: one run that ends the input, its watermark far below every record while they run
  (:data:`BATCH_LATENESS`), so that each timer fires at the end, as in Flink's batch mode; the
  processing-time timers too, after the event-time ones (processing-time windows fire at the
  end of a batch, as Flink fires them).
- ``STREAMING`` over a collection (in memory, bounded): one run that ends the input, the
  watermark following the event times within it.
- ``STREAMING`` over files or Kafka: a Structured Streaming query (see
  :mod:`statecore.spark.dataflow`).
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
import threading
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.keygroups import compute_default_max_parallelism
from statecore.pyflink.datastream.connectors.delta import DeltaSink
from statecore.pyflink.datastream.connectors.file_system import FileSink, FileSource
from statecore.pyflink.datastream.connectors.kafka import KafkaSource
from statecore.pyflink.datastream.data_stream import Environment, Plan
from statecore.pyflink.datastream.operators import (
    KEYED_BY_SEQUENCE,
    CheckpointedPipelineFunction,
    PipelineFunction,
    Prepare,
    Reduce,
    SideRoute,
    encode_key,
)
from statecore.runtime.broadcast import instance_keys
from statecore.runtime.functions import CheckpointedFunction
from statecore.snapshot.storage import table_filesystem

if TYPE_CHECKING:
    from statecore.spark.dataflow import Dataflow, SideSink

__all__ = [
    "BATCH_LATENESS",
    "CollectionSource",
    "JobClient",
    "JobExecutionResult",
    "dataflow",
    "job_plans",
]

BATCH_LATENESS = timedelta(days=100_000_000)
"""A batch run's allowed lateness: the watermark stays far below every record while they run
and reaches ``MAX_WATERMARK`` at the end (Flink's batch mode)."""

TEXT_SCHEMA = pa.schema([pa.field("subtask", pa.int32()), pa.field("text", pa.string())])


class CollectionSource:
    """``from_collection``'s elements (on the driver until the job runs)."""

    bounded = True

    def __init__(self, elements: list[Any]) -> None:
        self.elements = elements


class JobExecutionResult:
    """What ``execute`` returns: the statecore job and its completed checkpoints."""

    def __init__(self, job_name: str, checkpoints: list[int]) -> None:
        self.job_name = job_name
        self.checkpoints = checkpoints
        """The ids of the job's completed checkpoints."""

    def get_job_id(self) -> str:
        return self.job_name

    def get_job_execution_result(self) -> JobExecutionResult:
        return self

    def __repr__(self) -> str:
        return f"JobExecutionResult({self.job_name!r}, checkpoints={self.checkpoints})"


def _key_type(plan: Plan) -> tuple[str, str]:
    """The key column's type and the key's encoding (``sequence``: no ``key_by``)."""
    if plan.key_selector is None:
        return "long", KEYED_BY_SEQUENCE
    name = getattr(plan.key_type, "name", None)
    if name in ("STRING", "CHAR"):
        return "string", "string"
    if name in ("LONG", "INT", "SHORT", "BYTE"):
        return "long", "long"
    return "binary", "pickle"


def _output_schema(plan: Plan) -> pa.Schema:
    if not isinstance(plan.sink, DeltaSink):
        return TEXT_SCHEMA
    info = plan.element_type
    if info is None or getattr(info, "pickled", False):
        typed = "the last map or process an output_type"
        if plan.side_tag is not None and not plan.side_steps:
            typed = f"OutputTag({plan.side_tag.tag_id!r}, ...) a type_info"
        raise PyFlinkUnsupportedError(
            f"sink_to(DeltaSink({plan.sink.path!r})): the stream's elements have no declared "
            f"type; give {typed} (Types.ROW_NAMED([...], [...]) names the table's columns) "
            f"({COMING_FROM_PYFLINK})"
        )
    arrow = info.arrow
    if pa.types.is_struct(arrow) and getattr(info, "kind", "") in ("ROW", "TUPLE"):
        return pa.schema([arrow.field(i) for i in range(arrow.num_fields)])
    return pa.schema([pa.field("value", arrow)])


def _source(plan: Plan, stream: bool) -> Any:
    from statecore.spark.dataflow import Source

    source = plan.source
    if isinstance(source, CollectionSource):
        return Source(kind="rows", rows=[pickle.dumps(e, protocol=5) for e in source.elements])
    if isinstance(source, FileSource):
        if stream and source.bounded is False and len(source.paths) != 1:
            raise PyFlinkUnsupportedError(
                f"a monitored FileSource reads one file or one folder, not {list(source.paths)} "
                f"({COMING_FROM_PYFLINK})"
            )
        return Source(kind="text", paths=source.paths, bounded=source.bounded)
    assert isinstance(source, KafkaSource)
    options = {
        "kafka.bootstrap.servers": source.bootstrap_servers,
        "subscribe": ",".join(source.topics),
        "startingOffsets": source.starting.spark_offsets,
    }
    options.update({f"kafka.{k}": v for k, v in source.properties.items()})
    return Source(kind="kafka", options=options, bounded=source.bounded)


def print_lines(rows: Iterable[tuple[int, str]], identifier: str | None, parallelism: int) -> None:
    """Each row as Flink's print sink writes it: ``identifier:subtask> text``."""
    out = sys.stdout
    for subtask, text in rows:
        if parallelism > 1:
            prefix = f"{identifier}:{subtask + 1}> " if identifier else f"{subtask + 1}> "
        else:
            prefix = f"{identifier}> " if identifier else ""
        out.write(f"{prefix}{text}\n")
    out.flush()


class _Sink:
    """The driver side of ``print()`` and a streaming ``FileSink``: a checkpoint's rows (a
    side output's, ``part`` naming its part files apart from the main output's)."""

    def __init__(self, plan: Plan, job: str, parallelism: int, part: str | None = None) -> None:
        self.plan = plan
        self.job = job
        self.parallelism = parallelism
        self.part = job if part is None else f"{job}-{part}"

    def __call__(self, checkpoint: int, rows: pa.Table) -> None:
        pairs = list(zip(rows.column("subtask").to_pylist(), rows.column("text").to_pylist()))
        sink = self.plan.sink
        if isinstance(sink, FileSink):
            if pairs:
                fs, root = table_filesystem(sink.base_path)
                fs.create_dir(root, recursive=True)
                name = f"{root}/part-{self.part}-{checkpoint:012d}"
                with fs.open_output_stream(name) as out:
                    out.write("".join(f"{text}\n" for _, text in pairs).encode())
            return
        print_lines(pairs, self.plan.sink_identifier, self.parallelism)


def _event_time(plan: Plan, watermarks: Any) -> bool:
    return bool(
        watermarks is not None
        and watermarks.out_of_orderness is not None
        and (watermarks.timestamp_assigner is not None or isinstance(plan.source, KafkaSource))
    )


def _inputs(plan: Plan, batch: bool) -> tuple[bool, bool, timedelta, list[tuple[Plan, Any]]]:
    """Whether the job is a stream, has event time, its allowed lateness, and each input's plan
    with its watermark strategy: ``plan`` itself, or the inputs of a ``union``/``connect``
    (a union's own watermark strategy and steps apply to each of its inputs)."""
    inputs = [(i, i.watermarks or plan.watermarks) for i in plan.inputs] or [
        (plan, plan.watermarks)
    ]
    collections = [isinstance(i.source, CollectionSource) for i, _ in inputs]
    if not batch and any(collections) and not all(collections):
        raise PyFlinkUnsupportedError(
            "a STREAMING job of a collection and a file or Kafka source: give every input the "
            f"same kind of source, or run it in BATCH mode ({COMING_FROM_PYFLINK})"
        )
    event_times = {_event_time(i, w) for i, w in inputs}
    if len(event_times) > 1:
        raise PyFlinkUnsupportedError(
            "inputs with and without event time: give every input of a union or connect a "
            f"watermark strategy with a timestamp assigner ({COMING_FROM_PYFLINK})"
        )
    event_time = event_times.pop()
    lateness = timedelta(0)
    if batch:
        lateness = BATCH_LATENESS
    elif event_time:
        delays = [w.out_of_orderness for _, w in inputs if w is not None]
        lateness = max((d for d in delays if d is not None), default=timedelta(0))
    return not batch and not collections[0], event_time, lateness, inputs


def _prepare(
    plan: Plan,
    single: Plan,
    number: int,
    watermarks: Any,
    event_time: bool,
    max_parallelism: int | None,
    broadcast_keys: tuple[Any, ...] = (),
) -> Prepare:
    """The stateless stage of input ``single`` of ``plan`` (number 0: the only one); a
    broadcast input's elements go to each of ``broadcast_keys``, numbered 0 (before the
    other input's, as Flink's ``BATCH`` mode processes the broadcast side first)."""
    several = single is not plan
    return Prepare(
        steps=single.before + (plan.before if several else ()),
        key_selector=single.key_selector if single.key_selector is not None else plan.key_selector,
        key_encoding=_key_type(plan)[1],
        decode="pickle" if isinstance(single.source, CollectionSource) else "text",
        source_type=single.source_type,
        timestamp_assigner=None if watermarks is None else watermarks.timestamp_assigner,
        event_time=event_time,
        input=0 if single.broadcast else number,
        tagged=plan.tagged,
        operator=single.source_name or "source",
        max_parallelism=max_parallelism,
        broadcast_keys=broadcast_keys if single.broadcast else (),
    )


def _broadcast_keys(encoding: str, parallelism: int, max_parallelism: int) -> tuple[Any, ...]:
    """The keys (as the key column holds them) under which each task of the keyed stage gets
    its copy of a broadcast element."""
    if encoding == "string":
        return tuple(instance_keys(parallelism, max_parallelism, lambda n: f"broadcast-{n}"))
    if encoding == "pickle":
        return tuple(
            instance_keys(
                parallelism, max_parallelism, lambda n: encode_key(f"broadcast-{n}", "pickle")
            )
        )
    return tuple(instance_keys(parallelism, max_parallelism, lambda n: n))


def _stage(plan: Plan) -> Plan:
    """What makes ``plan``'s keyed stage: its inputs, steps before it and its function."""
    return dataclasses.replace(
        plan,
        after=(),
        element_type=None,
        sink=None,
        sink_identifier=None,
        after_parallelism=(),
        side_tag=None,
        side_steps=(),
        uid=None,
        parallelism=None,
        max_parallelism=None,
    )


def job_plans(plans: list[Plan]) -> tuple[Plan, tuple[Plan, ...]]:
    """The job's plan (its main sink; ``sink`` ``None`` when only side outputs are sunk) and
    its side outputs' plans, each checked to come from the job's one keyed stage."""
    mains = [p for p in plans if p.side_tag is None]
    sides = tuple(p for p in plans if p.side_tag is not None)
    if len(mains) > 1:
        raise PyFlinkUnsupportedError(
            f"a job with {len(mains)} sinks: statecore runs one keyed operator and one sink per "
            "job (and a sink per side output, get_side_output); write to a Delta table "
            f"(sink_to(DeltaSink(path))) and read it twice ({COMING_FROM_PYFLINK})"
        )
    if mains:
        plan = mains[0]
    else:
        longest = max(sides, key=lambda p: len(p.after))
        plan = dataclasses.replace(
            longest, side_tag=None, side_steps=(), sink=None, sink_identifier=None
        )
    stage = _stage(plan)
    for side in sides:
        if _stage(side) != stage or side.after != plan.after[: len(side.after)]:
            raise PyFlinkUnsupportedError(
                f"get_side_output({side.side_tag.tag_id!r}) of another operator than the job's "
                "main output: statecore runs one keyed operator per job, whose main output and "
                f"side outputs are sunk ({COMING_FROM_PYFLINK})"
            )
    return plan, sides


def _side_sinks(
    sides: tuple[Plan, ...], job: str, parallelism: int
) -> tuple[tuple[SideRoute, ...], tuple[SideSink, ...]]:
    """Each side output's route in the keyed stage and its sink; a tag read twice gets a
    side output per stream (``<tag>``, ``<tag>.2``...)."""
    from statecore.spark.dataflow import SideSink

    routes: list[SideRoute] = []
    sinks: list[SideSink] = []
    seen: dict[str, int] = {}
    names: set[str] = set()
    for side in sides:
        tag = side.side_tag.tag_id
        seen[tag] = seen.get(tag, 0) + 1
        name = tag if seen[tag] == 1 else f"{tag[:190]}.{seen[tag]}"
        if name in names:
            raise PyFlinkUnsupportedError(
                f"side output {name!r} is both a tag and tag {tag!r} read a second time: "
                f"rename one of the tags ({COMING_FROM_PYFLINK})"
            )
        names.add(name)
        sink = side.sink
        delta = isinstance(sink, DeltaSink)
        routes.append(
            SideRoute(
                tag=tag,
                name=name,
                steps=side.side_steps,
                tag_type=side.side_tag.get_type_info(),
                output_type=side.element_type,
                output="columns" if delta else "text",
            )
        )
        sinks.append(
            SideSink(
                name=name,
                schema=_output_schema(side),
                table=sink.path if delta else None,
                on_output=None if delta else _Sink(side, job, parallelism, part=name),
            )
        )
    return tuple(routes), tuple(sinks)


def dataflow(env: Environment, plan: Plan, job: str, sides: tuple[Plan, ...] = ()) -> Dataflow:
    """The :class:`~statecore.spark.dataflow.Dataflow` of ``plan`` in ``env``, as job ``job``,
    with the side outputs ``sides`` (see :func:`job_plans`)."""
    from statecore.spark.dataflow import DEFAULT_OPERATOR, Dataflow

    batch = env._batch
    stream, event_time, lateness, inputs = _inputs(plan, batch)
    numbered = [(n if plan.inputs else 0, i, w) for n, (i, w) in enumerate(inputs, start=1)]
    key_type, encoding = _key_type(plan)
    function = plan.function
    if isinstance(function, Reduce):
        function = Reduce(function.reduce_function, emit_each=not batch)
    sink = plan.sink
    delta = sink.path if isinstance(sink, DeltaSink) else None
    parallelism = plan.parallelism or env._parallelism
    for pinned in {p for s in (plan, *sides) for p in s.after_parallelism}:
        if pinned != parallelism:
            raise PyFlinkUnsupportedError(
                f"set_parallelism({pinned}) on an operator after the keyed one: it runs in the "
                f"keyed operator's tasks ({parallelism or 'as many as Spark makes'}); give both "
                f"the same parallelism ({COMING_FROM_PYFLINK})"
            )
    max_parallelism = plan.max_parallelism or env._max_parallelism
    keys: tuple[Any, ...] = ()
    if any(i.broadcast for i in plan.inputs):  # a copy for each task: the tasks are fixed
        parallelism = parallelism or env.get_parallelism()
        max_parallelism = max_parallelism or compute_default_max_parallelism(parallelism)
        keys = _broadcast_keys(encoding, parallelism, max_parallelism)
    routes, side_sinks = _side_sinks(sides, job, env.get_parallelism())
    if sink is None:
        output = "none"
    else:
        output = "columns" if delta is not None else "text"
    prepares = [
        (_source(i, stream), _prepare(plan, i, n, w, event_time, max_parallelism, keys))
        for n, i, w in numbered
    ]
    stage = (
        CheckpointedPipelineFunction
        if isinstance(function, CheckpointedFunction)
        else PipelineFunction
    )
    return Dataflow(
        job=job,
        operator=plan.uid or DEFAULT_OPERATOR,
        source=prepares[0][0],
        prepare=prepares[0][1],
        more_inputs=tuple(prepares[1:]),
        key_type=key_type,
        function=stage(
            function,
            plan.after,
            function_type=plan.function_type,
            output_type=plan.element_type,
            output=output,
            pickled_key=encoding == "pickle",
            side_routes=routes,
        ),
        output_schema=_output_schema(plan),
        stream=stream,
        event_time=event_time,
        allowed_lateness=lateness,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        backend=env._backend,
        trigger_interval=env._checkpoint_interval,
        output_table=delta,
        text_output=sink.base_path if isinstance(sink, FileSink) and not stream else None,
        on_output=None
        if delta is not None or sink is None
        else _Sink(plan, job, env.get_parallelism()),
        side_outputs=side_sinks,
        processing_timers_at_end=batch,
    )


def run(env: Environment, plans: list[Plan], job: str) -> JobExecutionResult:
    from statecore.spark.dataflow import run_dataflow

    plan, sides = job_plans(plans)
    flow = dataflow(env, plan, job, sides)
    return JobExecutionResult(job, run_dataflow(flow, env.spark_session))


class JobClient:
    """PyFlink's ``JobClient`` of a job started by ``execute_async``: ``cancel()`` stops a
    stream (the output of its completed checkpoints stays), ``wait()`` waits for the end."""

    def __init__(self, env: Environment, plans: list[Plan], job: str) -> None:
        from statecore.spark.dataflow import run_dataflow

        self._job = job
        plan, sides = job_plans(plans)
        self._flow = dataflow(env, plan, job, sides)
        self._result: list[int] = []
        self._error: BaseException | None = None

        def target() -> None:
            try:
                self._result = run_dataflow(self._flow, env.spark_session)
            except BaseException as exc:  # raised again by wait()
                self._error = exc

        self._thread = threading.Thread(target=target, name=f"statecore-{job}", daemon=True)
        self._thread.start()

    def get_job_id(self) -> str:
        return self._job

    def cancel(self) -> None:
        self._flow.cancel.set()
        self._thread.join()

    def wait(self, timeout: float | None = None) -> JobExecutionResult:
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return JobExecutionResult(self._job, self._result)

    get_job_execution_result = wait
