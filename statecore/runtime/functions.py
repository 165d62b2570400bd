"""What user code sees: ``KeyedProcessFunction``, its ``RuntimeContext``, per-record ``Context``
with timers, and ``CheckpointedFunction`` for operator state.

As in PyFlink, state is declared in ``open()`` from descriptors and used in ``process_element()``,
where the runtime has already made the record's key current:

>>> from statecore.descriptors import ValueStateDescriptor
>>> class RunningTotal(KeyedProcessFunction):
...     def open(self, ctx):
...         self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))
...     def process_element(self, value, ctx):
...         self.total.update(self.total.value() + value.amount)
...         yield ctx.current_key, self.total.value()

The names a function uses are exported here and from ``statecore.runtime`` (and the package
root): the contexts, :class:`~statecore.backends.timers.TimerService`, ``TimeDomain`` (what
``ctx.time_domain`` is in ``on_timer``), ``MIN_WATERMARK`` (the watermark before any event
time) and ``MAX_WATERMARK`` (after the end of a bounded input). PyFlink's spellings of them
(``ctx.get_current_key()``, ``ctx.timer_service()``,
``runtime_context.get_index_of_this_subtask()``) raise
:class:`~statecore.errors.PyFlinkSpellingError` naming statecore's.

A function that also implements :class:`CheckpointedFunction` gets ``initialize_state()`` before
``open()`` (with the operator state store and whether the job was restored) and
``snapshot_state()`` before each checkpoint.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from statecore.backends.base import KeyedStateBackend
from statecore.backends.operator import OperatorStateStore
from statecore.backends.timers import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    TimeDomain,
    Timer,
    TimerService,
)
from statecore.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from statecore.errors import PyFlinkSpelling, StateAccessError
from statecore.runtime.latency import LatencyTracker
from statecore.runtime.side_outputs import OutputTag, SideOutputs
from statecore.state import AggregatingState, ListState, MapState, ReducingState, State, ValueState

__all__ = [
    "RuntimeContext",
    "OutputContext",
    "Context",
    "OutputTag",
    "OnTimerContext",
    "KeyedProcessFunction",
    "CheckpointedFunction",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "TimeDomain",
    "Timer",
    "TimerService",
]


class RuntimeContext:
    """Where a function gets its keyed state (Flink's ``KeyedStateStore``) and learns which
    parallel instance it is."""

    def __init__(
        self,
        backend: KeyedStateBackend,
        *,
        job: str,
        operator: str,
        subtask_index: int,
        parallelism: int,
        tracker: LatencyTracker | None = None,
    ) -> None:
        self.backend = backend
        self.job = job
        self.operator = operator
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.tracker = tracker
        """Latency tracking: registers the states handed out, for sampled records (see
        :mod:`.latency`)."""

    @property
    def max_parallelism(self) -> int:
        return self.backend.max_parallelism

    get_index_of_this_subtask = PyFlinkSpelling("runtime_context.subtask_index (an attribute)")
    get_number_of_parallel_subtasks = PyFlinkSpelling("runtime_context.parallelism (an attribute)")
    get_max_number_of_parallel_subtasks = PyFlinkSpelling(
        "runtime_context.max_parallelism (a property)"
    )
    get_task_name = PyFlinkSpelling(
        "runtime_context.operator (the operator's name; runtime_context.job is the job's)"
    )

    def _state(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> State:
        if not isinstance(descriptor, expected):
            raise StateAccessError(
                f"state {getattr(descriptor, 'name', descriptor)!r}: expected a "
                f"{expected.__name__}, got {type(descriptor).__name__}"
            )
        state = self.backend.get_partitioned_state(descriptor)
        return state if self.tracker is None else self.tracker.track(descriptor.name, state)

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        return self._state(descriptor, ValueStateDescriptor)  # type: ignore[return-value]

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        return self._state(descriptor, ListStateDescriptor)  # type: ignore[return-value]

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        return self._state(descriptor, MapStateDescriptor)  # type: ignore[return-value]

    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState:
        return self._state(descriptor, ReducingStateDescriptor)  # type: ignore[return-value]

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        return self._state(descriptor, AggregatingStateDescriptor)  # type: ignore[return-value]


class OutputContext:
    """What every function's context has, keyed or not: ``output(tag, value)`` emits ``value``
    to the side output ``tag`` (:class:`OutputTag`), beside the rows the function yields."""

    __slots__ = ("side_outputs",)

    def __init__(self, side_outputs: SideOutputs | None = None) -> None:
        self.side_outputs = SideOutputs() if side_outputs is None else side_outputs
        """Where ``output`` puts the values (the task's, shared by its contexts)."""

    def output(self, tag: OutputTag, value: Any) -> None:
        """Emit ``value`` to the side output ``tag`` (a row of its table on Spark: a tuple in
        the side output's schema)."""
        self.side_outputs.emit(tag, value)


class Context(OutputContext):
    """The per-record context: the current key (set by the runtime, never by user code), the
    record's event time (epoch ms, ``None`` without an event-time column), the timers and
    the side outputs (``output``)."""

    __slots__ = ("_backend", "timestamp", "current_key")

    get_current_key = PyFlinkSpelling("ctx.current_key (an attribute set per record)")

    def __init__(self, backend: KeyedStateBackend, side_outputs: SideOutputs | None = None) -> None:
        super().__init__(side_outputs)
        self._backend = backend
        self.timestamp: int | None = None
        self.current_key: Any = None
        """The record's key (set by the runtime per record)."""

    @property
    def timer_service(self) -> TimerService:
        """Register or delete event-time and processing-time timers for the current key."""
        return self._backend.timer_service


class OnTimerContext(Context):
    """The context of ``on_timer``: the timer's key is current (``current_key``),
    ``timestamp`` is the timer's."""

    __slots__ = ("time_domain", "namespace")

    def __init__(self, backend: KeyedStateBackend, side_outputs: SideOutputs | None = None) -> None:
        super().__init__(backend, side_outputs)
        self.time_domain = TimeDomain.EVENT_TIME
        self.namespace = ""


class KeyedProcessFunction(ABC):
    """A function over a keyed stream with access to keyed state (Flink's KeyedProcessFunction)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        """Declare state here."""

    @abstractmethod
    def process_element(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        """Handle one record of the current key; yield output rows (tuples)."""

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterable[Any] | None:
        """A timer of the current key fired; yield output rows (tuples)."""
        return None

    def close(self) -> None:
        """Release resources."""


@dataclass(frozen=True)
class FunctionInitializationContext:
    """What ``initialize_state`` gets: the stores, and whether the job restored a checkpoint."""

    is_restored: bool
    operator_state_store: OperatorStateStore
    keyed_state_store: RuntimeContext


@dataclass(frozen=True)
class FunctionSnapshotContext:
    """What ``snapshot_state`` gets: the checkpoint being taken and its time (epoch ms)."""

    checkpoint_id: int
    timestamp: int


class CheckpointedFunction(ABC):
    """A function with operator state (Flink's ``CheckpointedFunction``); mix it into a
    :class:`KeyedProcessFunction`."""

    @abstractmethod
    def initialize_state(self, context: FunctionInitializationContext) -> None:
        """Register operator (and keyed) state; called before ``open()``."""

    @abstractmethod
    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        """Bring operator state up to date; called before each checkpoint is written."""
