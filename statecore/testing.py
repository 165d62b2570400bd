"""Unit-testing a function without Spark: :class:`KeyedProcessFunctionHarness`.

In the spirit of Flink's ``KeyedOneInputStreamOperatorTestHarness``: the harness runs a
``KeyedProcessFunction`` in the task a Spark job runs it in
(:class:`~statecore.runtime.task.KeyedOperatorTask`, one subtask owning every key group) on
either keyed state backend, with a processing-time clock that moves only when told to. A test
feeds elements with their timestamps, advances the watermark and the processing time (firing
due timers), reads the output, the state of a key and the pending timers, and snapshots the
state to restore it into a new harness, on the same backend or the other one.

>>> from collections import namedtuple
>>> from statecore import KeyedProcessFunction, ValueStateDescriptor
>>> Click = namedtuple("Click", "user page")
>>> class CountClicks(KeyedProcessFunction):
...     def open(self, ctx):
...         self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))
...     def process_element(self, click, ctx):
...         self.count.update(self.count.value() + 1)
...         ctx.timer_service.register_event_time_timer(ctx.timestamp + 1000)
...     def on_timer(self, timestamp, ctx):
...         yield ctx.current_key, self.count.value()
>>> with KeyedProcessFunctionHarness(CountClicks(), key="user") as harness:
...     harness.process_element(Click("ann", "/"), timestamp=100)
...     harness.process_element(Click("ann", "/cart"), timestamp=200)
...     harness.state("count", key="ann"), len(harness.timers())
...     harness.advance_watermark(1100)
...     saved = harness.snapshot()
[]
[]
(2, 2)
[('ann', 2)]
>>> with KeyedProcessFunctionHarness(CountClicks(), key="user", backend="rocksdb",
...                                  restore=saved) as restored:
...     restored.state("count", key="ann"), [t.timestamp for t in restored.timers()]
(2, [1200])

A snapshot (:class:`OperatorSubtaskState`) holds the subtask's state in memory as the backends
snapshot it: the Arrow rows of each key group of each keyed state and of the timers (the rows a
checkpoint writes to its Delta tables), the operator state, the watermark and the processing
time. Restoring loads them through the backend's restore path, migrating rows of an older but
compatible schema as a job's restore does; a ``CheckpointedFunction`` gets ``snapshot_state``
and, restored, ``initialize_state`` with ``is_restored`` true. The harness writes no Delta table
and needs no catalog: checkpoints themselves are tested through ``keyed_process``.

Every element reaches ``process_element``, with its timestamp, whatever the watermark, as in a
job run by ``keyed_process`` with its default ``late_data="process"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from types import TracebackType
from typing import Any

import pyarrow as pa

from statecore.backends import BackendParameters, OperatorStateStore, create_backend
from statecore.backends.base import KeyedStateBackend, RestoreSource, snapshot_schema
from statecore.backends.timers import MAX_WATERMARK, MIN_WATERMARK, TimeDomain, Timer
from statecore.compatibility import migrate_rows
from statecore.descriptors import MapStateDescriptor, StateDescriptor, StateKind
from statecore.errors import ConfigError, MaxParallelismMismatchError
from statecore.keygroups import Key, KeyGroupRange
from statecore.runtime.broadcast import KeyedBroadcastFunction, KeyedBroadcastProcessFunction
from statecore.runtime.co_process import (
    KeyedCoProcessFunction,
    TaggedElement,
    as_tagged,
    two_input_function,
)
from statecore.runtime.functions import KeyedProcessFunction, OutputTag
from statecore.runtime.restore import RestorePlan
from statecore.runtime.task import KeyedOperatorTask
from statecore.state import VOID_NAMESPACE
from statecore.ttl.time import ManualTimeProvider
from statecore.types import TypeInfo, TypeSpec

__all__ = [
    "KeyedBroadcastHarness",
    "KeyedProcessFunctionHarness",
    "KeyedTwoInputHarness",
    "OperatorSubtaskState",
]


@dataclass(frozen=True)
class OperatorSubtaskState:
    """A harness's snapshot (Flink's ``OperatorSubtaskState``): per keyed state and key group
    the snapshot rows, per key group the timers' rows, per operator state its rows, and the
    watermark and processing time it was taken at."""

    checkpoint_id: int
    max_parallelism: int
    watermark: int
    processing_time: int
    keyed: Mapping[str, Mapping[int, pa.Table]]
    timers: Mapping[int, pa.Table]
    operator: Mapping[str, pa.Table]

    def restore_source(self, key_type: TypeInfo) -> RestoreSource:
        """The backend's restore source: each state's rows by key group, migrated to the
        schema of the descriptor registering it."""

        def read(descriptor: StateDescriptor) -> Iterable[tuple[int, pa.Table]]:
            expected = snapshot_schema(key_type, descriptor)
            label = f"harness checkpoint {self.checkpoint_id}, state {descriptor.name!r}"
            rows = self.keyed.get(descriptor.name, {})
            return ((kg, migrate_rows(rows[kg], expected, label=label)) for kg in sorted(rows))

        return read


class KeyedProcessFunctionHarness:
    """Runs ``function`` in a :class:`~statecore.runtime.task.KeyedOperatorTask` without Spark
    (see the module docstring); use it as a context manager, or :meth:`close` it.

    ``key`` selects an element's key: the name of its key field (as ``keyed_process``'s key
    column) or a function of the element (Flink's ``KeySelector``); ``key_type`` is the keys'
    type (``str``, ``int``, ``bytes`` or a :class:`~statecore.types.TypeInfo`). ``backend`` is
    ``"heap"``, ``"rocksdb"`` or :class:`~statecore.backends.BackendParameters`. The
    processing time (epoch ms, also TTL's clock) starts at ``processing_time``: by default 0, or
    the restored snapshot's. ``restore`` is a snapshot of another harness to start from. The
    function is opened (``initialize_state`` first for a ``CheckpointedFunction``) here.
    """

    def __init__(
        self,
        function: KeyedProcessFunction,
        *,
        key: str | Callable[[Any], Key],
        key_type: TypeSpec = str,
        backend: str | BackendParameters = "heap",
        max_parallelism: int = 128,
        processing_time: int | None = None,
        restore: OperatorSubtaskState | None = None,
        job: str = "harness",
        operator: str = "main",
    ) -> None:
        self.key_selector: Callable[[Any], Key] = attrgetter(key) if isinstance(key, str) else key
        key_info = key_type if isinstance(key_type, TypeInfo) else TypeInfo.of(key_type)
        if restore is not None and restore.max_parallelism != max_parallelism:
            raise MaxParallelismMismatchError(
                f"harness checkpoint {restore.checkpoint_id} has max parallelism "
                f"{restore.max_parallelism}; restored with {max_parallelism}"
            )
        if processing_time is None:
            processing_time = 0 if restore is None else restore.processing_time
        self.clock = ManualTimeProvider(processing_time)
        """The clock of processing-time timers and TTL (moved by :meth:`set_processing_time`)."""
        self.backend: KeyedStateBackend = create_backend(
            BackendParameters.of(backend),
            key_type=key_info,
            key_group_range=KeyGroupRange(0, max_parallelism - 1),
            max_parallelism=max_parallelism,
            ttl_time_provider=self.clock,
            restore_source=None if restore is None else restore.restore_source(key_info),
        )
        self.output: list[Any] = []
        """Everything the function emitted so far, in order (elements and timers alike)."""
        self._side_outputs: dict[str, list[Any]] = {}
        self.checkpoint_id = 0 if restore is None else restore.checkpoint_id
        """The last snapshot's id (the restored one's until this harness takes one)."""
        self._restored_keyed: dict[str, Mapping[int, pa.Table]] = (
            {} if restore is None else dict(restore.keyed)
        )
        try:
            if restore is not None:
                for key_group, rows in sorted(restore.timers.items()):
                    self.backend.timer_service.restore_key_group(key_group, rows)
            self.task = KeyedOperatorTask(
                function,
                self.backend,
                job=job,
                operator=operator,
                subtask_index=0,
                parallelism=1,
                restore=RestorePlan(
                    job, operator, checkpoint_id=None if restore is None else restore.checkpoint_id
                ),
                operator_state=OperatorStateStore(
                    restored=None if restore is None else dict(restore.operator)
                ),
                restore_timers=False,
            )
            self.task.open()
            if restore is not None and restore.watermark > MIN_WATERMARK:
                self.advance_watermark(restore.watermark)  # as a job restores its watermark
        except BaseException:
            self.backend.close()
            raise

    @property
    def function(self) -> KeyedProcessFunction:
        return self.task.function  # type: ignore[return-value]

    # -- driving it ------------------------------------------------------------------------
    def process_element(self, element: Any, timestamp: int | None = None) -> list[Any]:
        """Run ``process_element`` for ``element`` (``ctx.timestamp`` is ``timestamp``, epoch
        ms); what it emitted (also appended to :attr:`output`)."""
        return self.process_elements([element], None if timestamp is None else [timestamp])

    def process_elements(
        self, elements: Iterable[Any], timestamps: Iterable[int | None] | None = None
    ) -> list[Any]:
        """Run ``process_element`` for each of ``elements`` in order (one timestamp each, when
        given); what they emitted."""
        if self.watermark == MAX_WATERMARK:
            raise ConfigError("the input ended (end_input()): no element can follow")
        select = self.key_selector
        out = self.task.process(((select(e), None, e) for e in elements), timestamps)
        return self._emitted(out)

    def advance_watermark(self, watermark: int) -> list[Any]:
        """Advance the event-time watermark (it never moves back), firing every event-time timer
        at or below it in timestamp order; what ``on_timer`` emitted."""
        return self._emitted(self.task.advance_watermark(watermark))

    def end_input(self) -> list[Any]:
        """Flink's end of a bounded input: the watermark jumps to ``MAX_WATERMARK``, so every
        pending event-time timer fires (processing-time timers do not); what ``on_timer``
        emitted. No element may follow."""
        return self.advance_watermark(MAX_WATERMARK)

    def set_processing_time(self, now: int) -> list[Any]:
        """Move the processing-time clock to ``now`` (epoch ms; it never moves back), firing the
        processing-time timers due; what ``on_timer`` emitted."""
        if now < self.clock.now_ms:
            raise ConfigError(
                f"processing time moves forward only: {now} is before {self.clock.now_ms}"
            )
        self.clock.now_ms = now
        return self._emitted(self.task.advance_processing_time(now))

    def _emitted(self, out: list[Any]) -> list[Any]:
        """``out`` kept in :attr:`output`, and what went to side outputs meanwhile in theirs."""
        self.output += out
        for name, values in self.task.side_outputs.drain().items():
            self._side_outputs.setdefault(name, []).extend(values)
        return out

    # -- reading it ------------------------------------------------------------------------
    def side_output(self, tag: OutputTag | str) -> list[Any]:
        """Everything the function emitted so far to the side output ``tag`` (an
        :class:`~statecore.runtime.side_outputs.OutputTag` or its name) with
        ``ctx.output(tag, value)``, in order (Flink's harness ``getSideOutput``)."""
        return list(self._side_outputs.get(OutputTag.of(tag).name, ()))

    @property
    def watermark(self) -> int:
        """The current watermark (``MIN_WATERMARK`` before any)."""
        return self.backend.timer_service.current_watermark()

    @property
    def processing_time(self) -> int:
        return self.clock.now_ms

    def state(self, name: str, key: Key, *, namespace: str | None = None) -> Any:
        """What the function would read from state ``name`` for ``key``: a value state's value
        (its default when unset), a list, a map as a ``dict``, a reducing or aggregating
        state's result. Read through the state, as ``process_element`` reads it (TTL applies; a
        read refreshes it under ``ON_READ_AND_WRITE``). With ``namespace`` the read is scoped to
        it and the state left in the void namespace, where the runtime's handles start."""
        backend = self.backend
        handle: Any = backend.get_partitioned_state(backend.descriptor(name))
        kind = backend.descriptor(name).kind
        saved = backend.key_context.save()
        try:
            backend.set_current_key(key)
            if namespace is not None:
                handle.set_current_namespace(namespace)
            if kind is StateKind.VALUE:
                return handle.value()
            if kind is StateKind.MAP:
                return dict(handle.items())
            return handle.get()
        finally:
            if namespace is not None:
                handle.set_current_namespace(VOID_NAMESPACE)
            backend.key_context.restore(saved)

    def keys(self, name: str, namespace: str = VOID_NAMESPACE) -> list[Any]:
        """The keys with a (possibly expired) value of state ``name`` in ``namespace``, sorted."""
        return sorted(self.backend.keys(name, namespace))

    def timers(self, domain: TimeDomain | None = None) -> list[Timer]:
        """The pending timers (of ``domain``, or both) by timestamp, then event time first."""
        service = self.backend.timer_service
        domains = list(TimeDomain) if domain is None else [domain]
        pending = [t for d in domains for t in service.timers(d)]
        return sorted(pending, key=lambda t: t.timestamp)

    # -- snapshots -------------------------------------------------------------------------
    def snapshot(self) -> OperatorSubtaskState:
        """The state as of now, to restore into a new harness (``restore=``); a
        ``CheckpointedFunction``'s ``snapshot_state`` runs first, with the next checkpoint id."""
        self.checkpoint_id += 1
        task, backend = self.task, self.backend
        task.snapshot_function_state(checkpoint_id=self.checkpoint_id, timestamp=self.clock.now_ms)
        groups = range(backend.key_group_range.start, backend.key_group_range.end + 1)
        keyed = {
            name: {
                kg: rows for kg in groups if (rows := backend.snapshot_key_group(name, kg)).num_rows
            }
            for name in backend.descriptors
        }
        # a restored state not registered since (declared lazily, e.g. a trigger's) is kept
        # as restored, as a job's checkpoint keeps a state its run did not touch
        for name, by_kg in self._restored_keyed.items():
            keyed.setdefault(name, dict(by_kg))
        service = backend.timer_service
        timers = {kg: rows for kg in groups if (rows := service.snapshot_key_group(kg)).num_rows}
        store = task.operator_state
        return OperatorSubtaskState(
            checkpoint_id=self.checkpoint_id,
            max_parallelism=backend.max_parallelism,
            watermark=self.watermark,
            processing_time=self.clock.now_ms,
            keyed={name: by_kg for name, by_kg in keyed.items() if by_kg},
            timers=timers,
            operator={name: store.snapshot(name) for name in store.state_names},
        )

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the function and the backend (a RocksDB instance is removed)."""
        self.task.close()

    def __enter__(self) -> KeyedProcessFunctionHarness:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


KeySpec = str | Callable[[Any], Key]


def _selector(key: KeySpec) -> Callable[[Any], Key]:
    return attrgetter(key) if isinstance(key, str) else key


class KeyedTwoInputHarness(KeyedProcessFunctionHarness):
    """Runs a :class:`~statecore.runtime.co_process.KeyedCoProcessFunction` as a job runs it
    (one keyed input with a tag, Flink's ``KeyedTwoInputStreamOperatorTestHarness``):
    :meth:`process_element1` and :meth:`process_element2` feed either input; the watermark,
    processing time, state, timers and snapshots are those of
    :class:`KeyedProcessFunctionHarness`, shared by both inputs.

    ``key`` selects the key of both inputs' elements (a field name or a function), or is a
    pair: the first input's selector and the second's (Flink's ``connect(...).key_by(k1, k2)``).
    The other arguments are :class:`KeyedProcessFunctionHarness`'s.
    """

    def __init__(
        self,
        function: KeyedCoProcessFunction,
        *,
        key: KeySpec | tuple[KeySpec, KeySpec],
        **options: Any,
    ) -> None:
        first, second = key if isinstance(key, tuple) else (key, key)
        selectors = (_selector(first), _selector(second))

        def select(record: Any) -> Key:
            tagged = as_tagged(record)
            if tagged.input not in (1, 2):
                raise ConfigError(f"a two-input harness's record names input {tagged.input!r}")
            return selectors[tagged.input - 1](tagged.value)

        super().__init__(two_input_function(function), key=select, **options)
        self.co_function = function
        """The user's two-input function."""

    def process_element1(self, element: Any, timestamp: int | None = None) -> list[Any]:
        """Run ``process_element1`` for ``element`` of the first input; what it emitted."""
        return self.process_element(TaggedElement(1, element), timestamp)

    def process_element2(self, element: Any, timestamp: int | None = None) -> list[Any]:
        """Run ``process_element2`` for ``element`` of the second input; what it emitted."""
        return self.process_element(TaggedElement(2, element), timestamp)

    def process_elements1(
        self, elements: Iterable[Any], timestamps: Iterable[int | None] | None = None
    ) -> list[Any]:
        """``elements`` of the first input, in order."""
        return self.process_elements((TaggedElement(1, e) for e in elements), timestamps)

    def process_elements2(
        self, elements: Iterable[Any], timestamps: Iterable[int | None] | None = None
    ) -> list[Any]:
        """``elements`` of the second input, in order."""
        return self.process_elements((TaggedElement(2, e) for e in elements), timestamps)

    def __enter__(self) -> KeyedTwoInputHarness:
        return self


class KeyedBroadcastHarness(KeyedProcessFunctionHarness):
    """Runs a :class:`~statecore.runtime.broadcast.KeyedBroadcastProcessFunction` (the broadcast
    state pattern) in one subtask: :meth:`process_element` feeds the keyed input,
    :meth:`process_broadcast_element` the broadcast input. ``states`` are the broadcast state
    descriptors (Flink's ``broadcast(descriptor)``); a snapshot holds them as the subtask's
    operator state. The other arguments are :class:`KeyedProcessFunctionHarness`'s."""

    def __init__(
        self,
        function: KeyedBroadcastProcessFunction,
        *,
        key: KeySpec,
        states: Iterable[MapStateDescriptor] = (),
        **options: Any,
    ) -> None:
        selector = _selector(key)
        self.adapter = KeyedBroadcastFunction(function, tuple(states))
        super().__init__(self.adapter, key=lambda r: selector(as_tagged(r).value), **options)

    def process_elements(
        self, elements: Iterable[Any], timestamps: Iterable[int | None] | None = None
    ) -> list[Any]:
        """Keyed ``elements`` through ``process_element``, in order."""
        return super().process_elements((TaggedElement(1, e) for e in elements), timestamps)

    def process_broadcast_element(self, element: Any, timestamp: int | None = None) -> list[Any]:
        """Run ``process_broadcast_element`` for ``element``; what it emitted."""
        if self.watermark == MAX_WATERMARK:
            raise ConfigError("the input ended (end_input()): no element can follow")
        side_outputs = self.task.side_outputs
        return self._emitted(list(self.adapter.broadcast(element, timestamp, side_outputs) or ()))

    def broadcast_state(self, descriptor: MapStateDescriptor) -> dict[Any, Any]:
        """The broadcast state ``descriptor`` names, as a ``dict``."""
        return dict(self.task.operator_state.get_broadcast_state(descriptor).items())

    def __enter__(self) -> KeyedBroadcastHarness:
        return self
