"""``keyed_co_process``: a :class:`~statecore.runtime.co_process.KeyedCoProcessFunction` over two
DataFrames, run as one checkpoint of one keyed input with a tag.

The two inputs become one DataFrame: a ``key`` column (each input's key column, one type), an
``input`` column (1 or 2), a ``first`` and a ``second`` struct column (the record of its input;
null for the other), and, when the job has them, a ``ts`` event-time column and ``order_<i>``
columns. :func:`~statecore.spark.keyed.keyed_process` runs it, so the job's checkpoints, state,
watermark and output are those of any keyed job; in the task,
:class:`~statecore.runtime.co_process.TwoInputFunction` hands each record, as a namedtuple of
its input's columns, to ``process_element1`` or ``process_element2``.

Order within a key: by event time when ``event_time`` is given, then by the ``order_by``
columns (named alike in both inputs), then the first input before the second. Without
``event_time`` and ``order_by`` only the last holds: every record of the first input of a key
reaches the function before any of its second, and the order within one input is Spark's
(undefined). Flink guarantees no order between two inputs.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from statecore.descriptors import MapStateDescriptor
from statecore.errors import ConfigError
from statecore.runtime.broadcast import KeyedBroadcastFunction, KeyedBroadcastProcessFunction
from statecore.runtime.broadcast import instance_keys as broadcast_instance_keys
from statecore.runtime.co_process import KeyedCoProcessFunction, TaggedElement, two_input_function
from statecore.spark.job import KeyedRun
from statecore.spark.keyed import keyed_process

__all__ = ["keyed_broadcast_process", "keyed_co_process", "tagged_inputs"]

Pair = str | tuple[str, str]


def _pair(value: Pair, what: str) -> tuple[str, str]:
    if isinstance(value, str):
        return value, value
    if len(value) != 2:
        raise ConfigError(f"keyed_co_process: {what} is a column name or a pair, not {value!r}")
    return value[0], value[1]


class SparkRecords:
    """A tagged row of a task as its :class:`TaggedElement`: the input's struct as a namedtuple
    of the input's columns (pickled to the tasks; the namedtuple types are made there)."""

    def __init__(self, first: Sequence[str], second: Sequence[str]) -> None:
        self.names = (tuple(first), tuple(second))
        self._types: list[Any] = [None, None]

    def __call__(self, record: Any) -> TaggedElement:
        which = record.input
        fields = record.first if which == 1 else record.second
        row = self._types[which - 1]
        if row is None:
            row = self._types[which - 1] = namedtuple(
                "First" if which == 1 else "Second", self.names[which - 1], rename=True
            )
        return TaggedElement(which, row._make(fields.values()))

    def __getstate__(self) -> dict[str, Any]:
        return {"names": self.names}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.names = state["names"]
        self._types = [None, None]


def tagged_inputs(
    first: DataFrame,
    second: DataFrame,
    *,
    key: Pair,
    event_time: Pair | None = None,
    order_by: Sequence[str] = (),
    second_columns: Sequence[str] | None = None,
) -> DataFrame:
    """The one keyed input of two (see the module docstring); ``second_columns`` are the
    second input's record columns (default: all)."""
    keys = _pair(key, "key")
    times = None if event_time is None else _pair(event_time, "event_time")
    frames = (first, second)
    for side, (df, name) in enumerate(zip(frames, keys), start=1):
        missing = [
            c
            for c in (name, *order_by, *(times[side - 1 : side] if times else ()))
            if c not in df.columns
        ]
        if missing:
            raise ConfigError(
                f"keyed_co_process: input {side} has no column {missing} (it has {df.columns})"
            )
    key_types = [df.schema[name].dataType for df, name in zip(frames, keys)]
    if key_types[0] != key_types[1]:
        raise ConfigError(
            "keyed_co_process: the inputs' keys differ in type "
            f"({keys[0]} {key_types[0].simpleString()}, {keys[1]} "
            f"{key_types[1].simpleString()}); cast one to the other's"
        )
    names = [first.columns, list(second.columns if second_columns is None else second_columns)]
    structs = [T.StructType([df.schema[n] for n in cols]) for df, cols in zip(frames, names)]
    tagged = []
    for side, df in enumerate(frames, start=1):
        record = F.struct(*names[side - 1])
        columns = [
            F.col(keys[side - 1]).alias("key"),
            F.lit(side).alias("input"),
            (record if side == 1 else F.lit(None).cast(structs[0])).alias("first"),
            (record if side == 2 else F.lit(None).cast(structs[1])).alias("second"),
        ]
        if times is not None:
            columns.append(F.col(times[side - 1]).alias("ts"))
        columns += [F.col(c).alias(f"order_{i}") for i, c in enumerate(order_by)]
        tagged.append(df.select(*columns))
    return tagged[0].unionByName(tagged[1])


def keyed_co_process(
    first: DataFrame,
    second: DataFrame,
    *,
    key: Pair,
    function: KeyedCoProcessFunction,
    output_schema: T.StructType,
    job: str,
    checkpoint_id: int,
    event_time: Pair | None = None,
    order_by: Sequence[str] = (),
    **options: Any,
) -> KeyedRun:
    """Process ``first`` and ``second`` keyed by ``key`` with ``function`` as checkpoint
    ``checkpoint_id`` (see the module docstring for the order within a key).

    ``key`` names the key column of both inputs, or is a pair (the first input's, the
    second's; Flink's ``connect(...).key_by(k1, k2)``); ``event_time`` likewise names their
    event-time columns. ``order_by`` names columns both inputs have. Every other option is
    :func:`~statecore.spark.keyed.keyed_process`'s (``parallelism``, ``backend``,
    ``output_table``, ``allowed_lateness``, ``end_of_input``...).

    >>> # illustrative (needs Spark; docs/two-inputs.md runs a full example)
    >>> # run = keyed_co_process(clicks, profiles, key="user", function=Enrich(), ...)
    """
    for name in ("key", "order_by", "event_time"):
        if name in options:
            raise ConfigError(f"keyed_co_process: {name} is given once")
    tagged = tagged_inputs(first, second, key=key, event_time=event_time, order_by=order_by)
    unpack = SparkRecords(first.columns, second.columns)
    return keyed_process(
        tagged,
        key="key",
        function=two_input_function(function, unpack),
        output_schema=output_schema,
        job=job,
        checkpoint_id=checkpoint_id,
        event_time=None if event_time is None else "ts",
        order_by=[*(f"order_{i}" for i in range(len(order_by))), "input"],
        **options,
    )


_BROADCAST_KEY = "__statecore_broadcast_key"


def instance_keys(key_type: T.DataType, parallelism: int, max_parallelism: int) -> list[Any]:
    """One key per operator index ``0..parallelism-1`` that lands in its key-group range: the
    keys under which each task gets its copy of a broadcast element
    (:func:`statecore.runtime.broadcast.instance_keys` for a key column of ``key_type``)."""
    if not isinstance(key_type, T.IntegralType | T.StringType):
        raise ConfigError(
            f"keyed_broadcast_process: keys of type {key_type.simpleString()} (use a string or "
            "an integer key)"
        )
    if isinstance(key_type, T.IntegralType):
        return broadcast_instance_keys(parallelism, max_parallelism, lambda n: n)
    return broadcast_instance_keys(parallelism, max_parallelism, lambda n: f"broadcast-{n}")


def keyed_broadcast_process(
    keyed: DataFrame,
    broadcast: DataFrame,
    *,
    key: str,
    function: KeyedBroadcastProcessFunction,
    states: Sequence[MapStateDescriptor],
    output_schema: T.StructType,
    job: str,
    checkpoint_id: int,
    parallelism: int,
    max_parallelism: int,
    event_time: Pair | None = None,
    order_by: Sequence[str] = (),
    **options: Any,
) -> KeyedRun:
    """The broadcast state pattern on Spark: ``keyed`` (keyed by ``key``) and ``broadcast``
    (every task gets every element) through ``function`` with the broadcast ``states``, as
    checkpoint ``checkpoint_id``. ``parallelism`` and ``max_parallelism`` are the job's (each
    task's copy of a broadcast element is keyed into that task's key-group range). Within a
    task the broadcast elements come in the order of :func:`keyed_co_process`'s second input;
    the other options are :func:`~statecore.spark.keyed.keyed_process`'s.
    """
    if key not in keyed.columns:
        raise ConfigError(f"keyed_broadcast_process: the keyed input has no column {key!r}")
    key_type = keyed.schema[key].dataType
    keys = instance_keys(key_type, parallelism, max_parallelism)
    spark = keyed.sparkSession
    copies = spark.createDataFrame(
        [(k,) for k in keys], T.StructType([T.StructField(_BROADCAST_KEY, key_type)])
    )
    replicated = broadcast.crossJoin(copies)
    times = None if event_time is None else _pair(event_time, "event_time")
    tagged = tagged_inputs(
        keyed,
        replicated,
        key=(key, _BROADCAST_KEY),
        event_time=times,
        order_by=order_by,
        second_columns=broadcast.columns,
    )
    return keyed_process(
        tagged,
        key="key",
        function=KeyedBroadcastFunction(
            function, states, SparkRecords(keyed.columns, broadcast.columns)
        ),
        output_schema=output_schema,
        job=job,
        checkpoint_id=checkpoint_id,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        event_time=None if event_time is None else "ts",
        order_by=[*(f"order_{i}" for i in range(len(order_by))), "input"],
        **options,
    )
