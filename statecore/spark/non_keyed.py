"""``non_keyed_process``: a :class:`~statecore.runtime.process_function.ProcessFunction` over a
DataFrame without a key, run as one checkpoint of the keyed runtime with each row its own key
(its position), as the PyFlink layer runs ``DataStream.process`` on a stream without
``key_by``: the job's checkpoints, output table, side outputs and event time are those of any
keyed job, and its function has no keyed state and no timers.

Each row gets a position (``monotonically_increasing_id``: its partition and its place in it)
as the key and, after the ``order_by`` columns, the order within each task, so a task processes
its rows in their order; the function gets each row as a namedtuple of the DataFrame's columns.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from statecore.errors import ConfigError
from statecore.runtime.process_function import NonKeyedFunction, ProcessFunction
from statecore.spark.job import KeyedRun
from statecore.spark.keyed import keyed_process

__all__ = ["POSITION", "non_keyed_process"]

POSITION = "statecore_position"
"""The key column of a run without a key: each row's position."""
_RECORD = "statecore_record"


class RowRecords:
    """A positioned row as the user's row: a namedtuple of the DataFrame's columns (pickled to
    the tasks; the namedtuple type is made there)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self._type: Any = None

    def __call__(self, record: Any) -> Any:
        if self._type is None:
            make: Any = namedtuple  # the fields are the input's, known at run time
            self._type = make("Record", self.names, rename=True)
        return self._type._make(getattr(record, _RECORD).values())

    def __getstate__(self) -> dict[str, Any]:
        return {"names": self.names}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.names = state["names"]
        self._type = None


def non_keyed_process(
    df: DataFrame,
    *,
    function: ProcessFunction,
    output_schema: T.StructType,
    job: str,
    checkpoint_id: int,
    order_by: Sequence[str] = (),
    event_time: str | None = None,
    **options: Any,
) -> KeyedRun:
    """Process ``df``'s rows with ``function`` (a stream without a key) as checkpoint
    ``checkpoint_id``: each task processes its rows by ``event_time`` when given, then by
    ``order_by``, then in their order. Every other option is
    :func:`~statecore.spark.keyed.keyed_process`'s (``parallelism``, ``backend``,
    ``output_table``, ``side_outputs``, ``allowed_lateness``, ``end_of_input``...).

    >>> # illustrative (needs Spark; docs/state.md, "Without a key", runs a full example)
    >>> # run = non_keyed_process(orders, function=Large(), output_schema=..., job="large", ...)
    """
    if "key" in options:
        raise ConfigError("non_keyed_process: a stream without a key takes no key column")
    clashes = [c for c in (POSITION, _RECORD) if c in df.columns]
    if clashes:
        raise ConfigError(f"non_keyed_process: the input has statecore's column(s) {clashes}")
    wanted = [c for c in (*order_by, *([event_time] if event_time else [])) if c]
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise ConfigError(f"non_keyed_process: the input has no column {missing} ({df.columns})")
    positioned = df.select(
        F.monotonically_increasing_id().alias(POSITION),
        F.struct(*[F.col(f"`{c}`") for c in df.columns]).alias(_RECORD),
        *[F.col(f"`{c}`") for c in dict.fromkeys(wanted)],
    )
    return keyed_process(
        positioned,
        key=POSITION,
        function=NonKeyedFunction(function, RowRecords(df.columns)),
        output_schema=output_schema,
        job=job,
        checkpoint_id=checkpoint_id,
        order_by=[*order_by, POSITION],
        event_time=event_time,
        **options,
    )
