"""The vectorized keyed API: functions over Arrow batches grouped by key, on the same state.

A :class:`KeyedBatchFunction` declares state in ``open()`` exactly like a
:class:`~statecore.runtime.KeyedProcessFunction`, but gets a :class:`KeyedBatch` at a time: the
rows (in processing order), their distinct keys and, per row, the index of its key. It reads
and writes state **once per distinct key and batch** and computes everything else with Arrow or
numpy, so no Python runs per record. The state is the same (same descriptors, same backends,
same checkpoints): a job can switch between the per-record and the vectorized API from one
checkpoint to the next.

Two ready-made functions cover the common cases: :class:`RunningAggregate` (per row, the key's
running sum / count / min / max carried over from the state) and :class:`Aggregate` (per key and
batch, the aggregate merged with the state).

>>> import pyarrow as pa
>>> from statecore.backends import HeapKeyedStateBackend
>>> from statecore.descriptors import ValueStateDescriptor
>>> from statecore.keygroups import KeyGroupRange
>>> from statecore.runtime.task import KeyedOperatorTask
>>> from statecore.types import TypeInfo
>>> backend = HeapKeyedStateBackend(
...     key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 127), max_parallelism=128)
>>> total = ValueStateDescriptor("total", int, default=0)
>>> task = KeyedOperatorTask(RunningAggregate("amount", total, output="running"), backend,
...                          job="j", operator="main", subtask_index=0, parallelism=1)
>>> task.open()
>>> rows = pa.table({"user": ["a", "b", "a"], "kg": [3, 9, 3], "amount": [5, 1, 2]})
>>> task.process_keyed_table(rows, key="user", key_group="kg").column("running").to_pylist()
[5, 1, 7]
>>> task.process_keyed_table(rows, key="user", key_group="kg").column("running").to_pylist()
[12, 2, 14]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statecore.backends.base import BatchKeySetter, KeyedStateBackend
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ConfigError, StateAccessError
from statecore.runtime.functions import RuntimeContext
from statecore.state import ValueState

__all__ = ["KeyedBatch", "KeyedBatchFunction", "RunningAggregate", "Aggregate", "AggregateOp"]

AggregateOp = Literal["sum", "count", "min", "max"]
_OPS: tuple[str, ...] = ("sum", "count", "min", "max")


class KeyedBatch:
    """Rows of several keys, grouped: ``rows`` in processing order, ``keys`` (distinct, in order
    of first appearance), their ``key_groups``, and ``codes`` (per row, the index of its key).

    State is read and written per distinct key: :meth:`values` / :meth:`update` for a
    ``ValueState``, or :meth:`each_key` to make each distinct key current in turn and use any
    state handle.
    """

    def __init__(
        self,
        rows: pa.Table,
        keys: list[Any],
        key_groups: list[int],
        codes: np.ndarray[Any, np.dtype[np.int32]],
        backend: KeyedStateBackend,
    ) -> None:
        self.rows = rows
        self.keys = keys
        self.key_groups = key_groups
        self.codes = codes
        self._backend = backend
        self._setter: tuple[BatchKeySetter, list[bytes] | None] | None = None

    @property
    def num_rows(self) -> int:
        return int(self.rows.num_rows)

    def each_key(self) -> Iterator[int]:
        """Make each distinct key current in turn; yields its index in :attr:`keys`.

        The key groups were checked by the task for the whole batch, so each key is made
        current as in the per-record loop (the backend's batch key setter; on RocksDB the
        keys' prefixes built once per batch, for every pass over the keys).
        """
        (context, listeners), prefixes = self._key_setter()
        previous = context.save()
        try:
            for i, (key, key_group) in enumerate(zip(self.keys, self.key_groups)):
                context.key = key
                context.key_group = key_group
                if prefixes is not None:
                    context.prefix = prefixes[i]
                if listeners:
                    for listener in listeners:
                        listener()
                yield i
        finally:
            context.restore(previous)

    def _key_setter(self) -> tuple[BatchKeySetter, list[bytes] | None]:
        """The backend's setter for this batch's keys, and their prefixes (made once)."""
        if self._setter is None:
            backend = self._backend
            try:
                keys = pa.array(self.keys)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
                keys = None  # keys of mixed types: each is encoded (and refused) by itself
            prefixed = None
            if keys is not None:
                prefixed = backend.prefixed_key_setter(keys, pa.array(self.key_groups, pa.int32()))
            self._setter = prefixed or (backend.batch_key_setter(), None)
        return self._setter

    def values(self, state: ValueState) -> list[Any]:
        """The state's value for each distinct key (its default, or ``None``, when unset)."""
        read = state.value
        return [read() for _ in self.each_key()]

    def update(self, state: ValueState, values: Sequence[Any]) -> None:
        """Write one value per distinct key (``None`` clears the key's value)."""
        if len(values) != len(self.keys):
            raise StateAccessError(f"{len(values)} values for {len(self.keys)} distinct keys")
        write = state.update
        for i in self.each_key():
            write(values[i])


class KeyedBatchFunction(ABC):
    """A function over :class:`KeyedBatch` es with keyed state: declare state in ``open()``,
    return the batch's output rows (an Arrow table or batch with the output schema's columns;
    extra columns are dropped) from :meth:`process_batch`."""

    def open(self, runtime_context: RuntimeContext) -> None:
        """Declare state here."""

    @abstractmethod
    def process_batch(self, batch: KeyedBatch) -> pa.Table | pa.RecordBatch | None:
        """Handle the rows of one batch; return the output rows, if any."""

    def close(self) -> None:
        """Release resources."""


def _numbers(batch: KeyedBatch, column: str, op: str) -> np.ndarray[Any, Any]:
    if column not in batch.rows.column_names:
        raise ConfigError(
            f"column {column!r} is not in the input columns {batch.rows.column_names}"
        )
    values = batch.rows.column(column)
    if op == "count":
        return np.ones(len(values), dtype=np.int64)
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise ConfigError(f"column {column!r} has type {values.type}; {op} needs numbers")
    if values.null_count:
        raise ConfigError(
            f"column {column!r} has {values.null_count} null values; filter or "
            f"fill them before a vectorized {op}"
        )
    wide = pa.int64() if pa.types.is_integer(values.type) else pa.float64()
    return values.cast(wide).to_numpy()  # type: ignore[no-any-return]


class _StateAggregate(KeyedBatchFunction):
    """An aggregate of one numeric column per key, kept in a ``ValueState``."""

    def __init__(
        self, column: str, state: ValueStateDescriptor, op: AggregateOp = "sum", *, output: str
    ) -> None:
        if op not in _OPS:
            raise ConfigError(f"unknown aggregate {op!r}; known: {list(_OPS)}")
        if not isinstance(state, ValueStateDescriptor):
            raise ConfigError(
                f"state {getattr(state, 'name', state)!r}: a vectorized aggregate "
                f"keeps its value in a ValueStateDescriptor, not "
                f"{type(state).__name__}"
            )
        arrow = state.value_info.arrow
        python_type = (
            int if pa.types.is_integer(arrow) else float if pa.types.is_floating(arrow) else None
        )
        if python_type is None or state.value_info.pickled:
            raise ConfigError(
                f"state {state.name!r} holds {state.value_info.arrow}; a "
                f"vectorized {op} needs an int or float ValueState"
            )
        if op == "count" and python_type is not int:
            raise ConfigError(f"state {state.name!r}: a count needs an int ValueState")
        self.column, self.descriptor, self.op, self.output = column, state, op, output
        self._python_type = python_type

    def open(self, runtime_context: RuntimeContext) -> None:
        self.state = runtime_context.get_state(self.descriptor)

    def _running(self, batch: KeyedBatch) -> tuple[np.ndarray[Any, Any], list[Any]]:
        """Per row, the key's aggregate so far (state included); per key, its new value."""
        import pandas as pd  # grouped running aggregates; loaded on first use, not on import

        values = _numbers(batch, self.column, self.op)
        if self._python_type is float:
            values = values.astype(np.float64)
        elif values.dtype.kind == "f":
            raise ConfigError(
                f"state {self.descriptor.name!r} holds ints; column "
                f"{self.column!r} has floats (declare the state float)"
            )
        stored = batch.values(self.state)
        codes = batch.codes
        grouped = pd.Series(values).groupby(codes, sort=False)
        if self.op in ("sum", "count"):
            start = np.array([0 if v is None else v for v in stored], dtype=values.dtype)
            running = grouped.cumsum().to_numpy() + start[codes]
        else:
            running = (grouped.cummin() if self.op == "min" else grouped.cummax()).to_numpy()
            known = np.array([v is not None for v in stored])
            if known.any():
                start = np.array([v if v is not None else 0 for v in stored], dtype=values.dtype)
                merge = np.minimum if self.op == "min" else np.maximum
                running = np.where(known[codes], merge(running, start[codes]), running)
        last = pd.Series(running).groupby(codes, sort=True).last().to_numpy()
        return running, last.tolist()


class RunningAggregate(_StateAggregate):
    """Per row: the key's running ``op`` (``sum``, ``count``, ``min``, ``max``) of ``column``,
    continued from the value in ``state`` (a ``ValueState`` of int or float; unset counts as
    the empty aggregate), as a new column ``output``; the state ends at the last row's value.

    The per-record equivalent reads the state, folds the row's value in, writes the state and
    emits the row with the result.
    """

    def __init__(
        self,
        column: str,
        state: ValueStateDescriptor,
        op: AggregateOp = "sum",
        *,
        output: str = "running",
    ) -> None:
        super().__init__(column, state, op, output=output)

    def process_batch(self, batch: KeyedBatch) -> pa.Table:
        running, last = self._running(batch)
        batch.update(self.state, last)
        return batch.rows.append_column(self.output, pa.array(running))


class Aggregate(_StateAggregate):
    """Per key and batch: ``op`` of ``column`` merged with the value in ``state``, emitted as
    ``(key column, output)`` rows (one per distinct key of the batch) and kept in the state."""

    def __init__(
        self,
        column: str,
        state: ValueStateDescriptor,
        op: AggregateOp = "sum",
        *,
        output: str = "aggregate",
        key: str = "key",
    ) -> None:
        super().__init__(column, state, op, output=output)
        self.key = key

    def process_batch(self, batch: KeyedBatch) -> pa.Table:
        _, last = self._running(batch)
        batch.update(self.state, last)
        return pa.table({self.key: batch.keys, self.output: last})


def group_by_key(
    rows: pa.Table, key: str
) -> tuple[list[Any], np.ndarray[Any, Any], np.ndarray[Any, np.dtype[np.int32]]]:
    """The distinct keys of ``rows`` (in order of first appearance), the row index of each
    key's first row, and per row the index of its key."""
    column = rows.column(key)
    if column.null_count:
        raise ConfigError(f"key column {key!r} has {column.null_count} null keys")
    encoded = pc.dictionary_encode(column.combine_chunks())
    codes = encoded.indices.to_numpy().astype(np.int32, copy=False)
    keys = encoded.dictionary.to_pylist()
    _, first = np.unique(codes, return_index=True)
    return keys, first, codes
