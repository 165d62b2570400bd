"""The broadcast state pattern over one keyed state: :class:`KeyedBroadcastProcessFunction`
(Flink's), run by :class:`KeyedBroadcastFunction` in the keyed runtime.

A keyed input meets a broadcast input (rules, thresholds, feature flags): each broadcast element
reaches ``process_broadcast_element`` on every parallel instance, which writes the instance's
broadcast state (operator state of mode ``BROADCAST``: checkpointed with the subtask, restored
on instance ``i`` from old instance ``i % old_parallelism``, as Flink redistributes it) and may
visit every key's state with ``ctx.apply_to_keyed_state``; keyed elements reach
``process_element``, which reads the broadcast state (read-only, as in Flink) beside the key's
own state and timers.

>>> from statecore.descriptors import MapStateDescriptor
>>> from statecore.testing import KeyedBroadcastHarness
>>> LIMITS = MapStateDescriptor("limits", str, int)
>>> class OverLimit(KeyedBroadcastProcessFunction):
...     def process_element(self, payment, ctx):
...         limit = ctx.get_broadcast_state(LIMITS).get("max")
...         if limit is not None and payment[1] > limit:
...             yield ctx.current_key, payment[1]
...     def process_broadcast_element(self, limit, ctx):
...         ctx.get_broadcast_state(LIMITS).put("max", limit)
>>> with KeyedBroadcastHarness(OverLimit(), key=lambda p: p[0], states=[LIMITS]) as harness:
...     harness.process_broadcast_element(100)
...     harness.process_element(("ann", 250))
[]
[('ann', 250)]

On Spark, ``keyed_broadcast_process`` gives every task of the keyed stage a copy of each
broadcast element (a record of input 2 under one of :func:`instance_keys`, a key in the task's
key-group range); PyFlink's ``DataStream.broadcast`` runs the same way
(:mod:`statecore.pyflink.datastream.broadcast`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from statecore.backends.base import KeyedStateBackend
from statecore.backends.operator import BroadcastState, OperatorStateStore
from statecore.backends.timers import TimerService
from statecore.descriptors import MapStateDescriptor, StateDescriptor
from statecore.errors import ConfigError, StateAccessError
from statecore.keygroups import assign_to_key_group, compute_operator_index_for_key_group
from statecore.runtime.co_process import Unpack, as_tagged
from statecore.runtime.functions import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    OutputContext,
    RuntimeContext,
)
from statecore.runtime.side_outputs import OutputTag, SideOutputs
from statecore.state import VOID_NAMESPACE, State

__all__ = [
    "BroadcastContext",
    "KeyedBroadcastFunction",
    "KeyedBroadcastProcessFunction",
    "ReadOnlyBroadcastState",
    "ReadOnlyContext",
    "ReadOnlyTimerContext",
    "instance_keys",
]


def instance_keys(parallelism: int, max_parallelism: int, make: Callable[[int], Any]) -> list[Any]:
    """One key per operator index ``0..parallelism-1`` that lands in that index's key-group
    range, the first of ``make(0)``, ``make(1)``... to do so: the keys under which each task
    of the keyed stage gets its copy of a broadcast element.

    >>> keys = instance_keys(2, 128, lambda n: f"broadcast-{n}")
    >>> from statecore.keygroups import assign_key_to_parallel_operator
    >>> [assign_key_to_parallel_operator(k, 128, 2) for k in keys]
    [0, 1]
    """
    found: dict[int, Any] = {}
    n = 0
    while len(found) < parallelism:
        key = make(n)
        group = assign_to_key_group(key, max_parallelism)
        found.setdefault(
            compute_operator_index_for_key_group(max_parallelism, parallelism, group), key
        )
        n += 1
    return [found[i] for i in range(parallelism)]


class ReadOnlyBroadcastState:
    """The broadcast state as ``process_element`` sees it: read, never written (a keyed element
    reaches one instance only, so a write would make the instances' copies differ)."""

    __slots__ = ("_state",)

    def __init__(self, state: BroadcastState) -> None:
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return self._state.items()

    def keys(self) -> Iterator[Any]:
        return (k for k, _ in self._state.items())

    def is_empty(self) -> bool:
        return self._state.is_empty()

    def __len__(self) -> int:
        return len(self._state)

    def _read_only(self, *args: Any) -> None:
        raise StateAccessError(
            f"broadcast state {self._state.descriptor.name!r} is read-only in process_element: "
            "write it in process_broadcast_element"
        )

    put = put_all = remove = clear = _read_only


class _Broadcast:
    """The broadcast states of one instance, registered on first use."""

    def __init__(self, store: OperatorStateStore, declared: Sequence[MapStateDescriptor]) -> None:
        self.store = store
        self.declared = {d.name for d in declared}

    def state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        if self.declared and descriptor.name not in self.declared:
            raise StateAccessError(
                f"broadcast state {descriptor.name!r} was not declared (declared: "
                f"{sorted(self.declared)})"
            )
        return self.store.get_broadcast_state(descriptor)


class ReadOnlyContext:
    """``process_element``'s context: the key, timestamp and timers of a keyed record, and
    the broadcast state read-only (``on_timer``'s too: :class:`ReadOnlyTimerContext`)."""

    __slots__ = ("_ctx", "_broadcast")

    def __init__(self, ctx: Context, broadcast: _Broadcast) -> None:
        self._ctx = ctx
        self._broadcast = broadcast

    @property
    def current_key(self) -> Any:
        return self._ctx.current_key

    @property
    def timestamp(self) -> int | None:
        return self._ctx.timestamp

    @property
    def timer_service(self) -> TimerService:
        return self._ctx.timer_service

    def output(self, tag: OutputTag, value: Any) -> None:
        """Emit ``value`` to the side output ``tag``."""
        self._ctx.output(tag, value)

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> ReadOnlyBroadcastState:
        return ReadOnlyBroadcastState(self._broadcast.state(descriptor))


class ReadOnlyTimerContext(ReadOnlyContext):
    """``on_timer``'s context (Flink's ``OnTimerContext`` is a ``ReadOnlyContext``): the
    timer's key, time and domain, its timers, and the broadcast state read-only."""

    __slots__ = ()

    @property
    def time_domain(self) -> Any:
        return self._ctx.time_domain  # type: ignore[attr-defined]

    @property
    def namespace(self) -> str:
        return self._ctx.namespace  # type: ignore[attr-defined, no-any-return]


Output = Callable[[OutputTag, Any], None]
"""Where a context's ``output(tag, value)`` goes."""


class BroadcastContext(OutputContext):
    """``process_broadcast_element``'s context: the element's timestamp, the broadcast state
    (writable), :meth:`apply_to_keyed_state` and side outputs (``output``: into
    ``side_outputs``, or through ``output`` when given, as the record's own context routes
    them). No current key and no timers, as in Flink."""

    __slots__ = ("timestamp", "_broadcast", "_backend", "_output")

    def __init__(
        self,
        timestamp: int | None,
        broadcast: _Broadcast,
        backend: KeyedStateBackend,
        side_outputs: SideOutputs | None = None,
        output: Output | None = None,
    ) -> None:
        super().__init__(side_outputs)
        self.timestamp = timestamp
        self._broadcast = broadcast
        self._backend = backend
        self._output = output

    def output(self, tag: OutputTag, value: Any) -> None:
        if self._output is None:
            super().output(tag, value)
        else:
            self._output(tag, value)

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        return self._broadcast.state(descriptor)

    def current_watermark(self) -> int:
        return self._backend.timer_service.current_watermark()

    def current_processing_time(self) -> int:
        return self._backend.timer_service.current_processing_time()

    def apply_to_keyed_state(
        self, descriptor: StateDescriptor, function: Callable[[Any, State], None]
    ) -> None:
        """Call ``function(key, state)`` for every key of this instance with a value of the
        state ``descriptor`` names, that key current (Flink's ``applyToKeyedState``)."""
        backend = self._backend
        state: Any = backend.get_partitioned_state(descriptor)
        saved = backend.key_context.save()
        try:
            for key in list(backend.keys(descriptor.name, VOID_NAMESPACE)):
                backend.set_current_key(key)
                function(key, state)
        finally:
            backend.key_context.restore(saved)


class KeyedBroadcastProcessFunction(ABC):
    """A keyed input with a broadcast input (Flink's ``KeyedBroadcastProcessFunction``)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        """Declare keyed state here."""

    @abstractmethod
    def process_element(self, value: Any, ctx: ReadOnlyContext) -> Iterable[Any] | None:
        """A keyed element (its key current); the broadcast state is read-only."""

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: BroadcastContext) -> Iterable[Any] | None:
        """A broadcast element (on every instance); write the broadcast state here."""

    def on_timer(self, timestamp: int, ctx: ReadOnlyTimerContext) -> Iterable[Any] | None:
        """A timer of the current key fired (the broadcast state read-only)."""
        return None

    def close(self) -> None:
        """Release resources."""


class KeyedBroadcastFunction(KeyedProcessFunction, CheckpointedFunction):
    """The adapter: keyed records (:class:`~statecore.runtime.co_process.TaggedElement` of input 1)
    through ``process_element``; broadcast elements through :meth:`broadcast`, once per
    instance (on Spark each instance gets its copy as a record of input 2). ``states``
    declares the broadcast states (Flink's ``broadcast(descriptors...)``): they are
    registered when the instance starts, so restored ones exist before any element.
    ``unpack`` is :class:`~statecore.runtime.co_process.TwoInputFunction`'s."""

    def __init__(
        self,
        function: KeyedBroadcastProcessFunction,
        states: Sequence[MapStateDescriptor] = (),
        unpack: Unpack | None = None,
    ) -> None:
        if not isinstance(function, KeyedBroadcastProcessFunction):
            raise ConfigError(f"{type(function).__name__} is not a KeyedBroadcastProcessFunction")
        self.function = function
        self.states = tuple(states)
        self.unpack: Unpack = as_tagged if unpack is None else unpack

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self._broadcast = _Broadcast(context.operator_state_store, self.states)
        for descriptor in self.states:
            self._broadcast.state(descriptor)

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        """Nothing to do: the broadcast states are operator state, snapshot as they are."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self._backend = runtime_context.backend
        self.function.open(runtime_context)

    def process_element(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        tagged = self.unpack(value)
        if tagged.input == 2:  # a broadcast element's copy for this instance (on Spark)
            return self.broadcast(tagged.value, ctx.timestamp, ctx.side_outputs, ctx.output)
        if tagged.input != 1:
            raise ConfigError(f"a broadcast function's record names input {tagged.input!r}")
        return self.function.process_element(tagged.value, ReadOnlyContext(ctx, self._broadcast))

    def broadcast(
        self,
        value: Any,
        timestamp: int | None = None,
        side_outputs: SideOutputs | None = None,
        output: Output | None = None,
    ) -> Iterable[Any] | None:
        """Run ``process_broadcast_element`` for a broadcast element on this instance (its side
        outputs into ``side_outputs``, the task's, or through ``output``)."""
        context = BroadcastContext(timestamp, self._broadcast, self._backend, side_outputs, output)
        return self.function.process_broadcast_element(value, context)

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterable[Any] | None:
        return self.function.on_timer(timestamp, ReadOnlyTimerContext(ctx, self._broadcast))

    def close(self) -> None:
        self.function.close()
