"""PyFlink's ``KeyedProcessFunction`` and ``RuntimeContext`` (``pyflink.datastream.functions``),
mapped onto statecore's: a function written against PyFlink's API runs in statecore's task
(the harness, ``keyed_process``, ``keyed_stream``) unchanged.

:class:`KeyedProcessFunction` is a statecore
:class:`~statecore.runtime.functions.KeyedProcessFunction`. When a PyFlink-style subclass is
defined, its ``open``, ``process_element`` and ``on_timer`` are wrapped once: ``open`` gets a
PyFlink :class:`RuntimeContext` around statecore's, ``process_element`` and ``on_timer`` a
PyFlink context (``ctx.timestamp()``, ``ctx.get_current_key()``, ``ctx.timer_service()``,
``ctx.time_domain()``) bound to the task's context once, not per record. Per record the wrapper
costs one call and one identity check; state handles and the timer service are statecore's own.

>>> from statecore.pyflink.common import Types
>>> from statecore.pyflink.datastream.state import ValueStateDescriptor
>>> from statecore.testing import KeyedProcessFunctionHarness
>>> class Count(KeyedProcessFunction):
...     def open(self, runtime_context: RuntimeContext):
...         self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
...     def process_element(self, value, ctx: 'KeyedProcessFunction.Context'):
...         self.count.update((self.count.value() or 0) + 1)
...         yield ctx.get_current_key(), ctx.timestamp(), self.count.value()
>>> with KeyedProcessFunctionHarness(Count(), key=lambda e: e[0]) as harness:
...     harness.process_elements([("a", 1), ("a", 2)], timestamps=[10, 20])
[('a', 10, 1), ('a', 20, 2)]
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from statecore.backends.timers import TimeDomain, TimerService
from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.datastream import broadcast_context
from statecore.pyflink.datastream.basic_functions import (
    AggregateFunction,
    FilterFunction,
    FlatMapFunction,
    Function,
    KeySelector,
    MapFunction,
    ReduceFunction,
)
from statecore.pyflink.datastream.converting import (
    PyFlinkListState,
    PyFlinkMapState,
    PyFlinkReadingState,
    PyFlinkValueState,
    composite,
)
from statecore.pyflink.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from statecore.runtime import co_process as sc_co
from statecore.runtime import functions as sc
from statecore.state import AggregatingState, ListState, MapState, ReducingState, ValueState

__all__ = [
    "Function",
    "MapFunction",
    "FlatMapFunction",
    "FilterFunction",
    "KeySelector",
    "ReduceFunction",
    "AggregateFunction",
    "RuntimeContext",
    "KeyedProcessFunction",
    "ProcessFunction",
    "CoMapFunction",
    "CoFlatMapFunction",
    "CoProcessFunction",
    "KeyedCoProcessFunction",
    "ProcessWindowFunction",
    "WindowFunction",
    "ProcessAllWindowFunction",
    "AllWindowFunction",
    "BaseBroadcastProcessFunction",
    "BroadcastProcessFunction",
    "KeyedBroadcastProcessFunction",
    "TimeDomain",
    "TimerService",
]


def _statecore(descriptor: Any) -> Any:
    """statecore's descriptor for a PyFlink one (a statecore descriptor passes unchanged)."""
    return descriptor.to_statecore() if isinstance(descriptor, StateDescriptor) else descriptor


class RuntimeContext:
    """PyFlink's ``RuntimeContext`` around statecore's
    :class:`~statecore.runtime.functions.RuntimeContext`: state from PyFlink descriptors, and the
    subtask's getters."""

    __slots__ = ("_context",)

    def __init__(self, context: sc.RuntimeContext) -> None:
        self._context = context

    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState:
        state = self._context.get_state(_statecore(state_descriptor))
        info = getattr(state_descriptor, "type_info", None)
        return PyFlinkValueState(state, info) if composite(info) else state  # type: ignore[return-value]

    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState:
        state = self._context.get_list_state(_statecore(state_descriptor))
        info = getattr(state_descriptor, "type_info", None)
        return PyFlinkListState(state, info) if composite(info) else state  # type: ignore[return-value]

    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState:
        state = self._context.get_map_state(_statecore(state_descriptor))
        key_info = getattr(state_descriptor, "key_type_info", None)
        info = getattr(state_descriptor, "type_info", None)
        if composite(key_info) or composite(info):
            return PyFlinkMapState(state, key_info, info)  # type: ignore[return-value]
        return state

    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState:
        state = self._context.get_reducing_state(_statecore(state_descriptor))
        info = getattr(state_descriptor, "type_info", None)
        return PyFlinkReadingState(state, info) if composite(info) else state  # type: ignore[return-value]

    def get_aggregating_state(
        self, state_descriptor: AggregatingStateDescriptor
    ) -> AggregatingState:
        return self._context.get_aggregating_state(_statecore(state_descriptor))

    def get_task_name(self) -> str:
        return self._context.operator

    def get_number_of_parallel_subtasks(self) -> int:
        return self._context.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._context.max_parallelism

    def get_index_of_this_subtask(self) -> int:
        return self._context.subtask_index

    def get_attempt_number(self) -> int:
        """0: statecore retries a run as a new run, restored from the last checkpoint."""
        return 0

    def get_task_name_with_subtasks(self) -> str:
        context = self._context
        return f"{context.operator} ({context.subtask_index + 1}/{context.parallelism})"

    def get_job_parameter(self, key: str, default_value: str) -> str:
        """``default_value``: statecore jobs have no global job parameters."""
        return default_value

    def get_metrics_group(self) -> Any:
        raise PyFlinkUnsupportedError(
            "runtime_context.get_metrics_group(): statecore has no metric groups; a job's "
            f"progress and latencies are in its run records ({COMING_FROM_PYFLINK})"
        )


class Context:
    """PyFlink's ``KeyedProcessFunction.Context``: the element's key, timestamp and timers."""

    __slots__ = ("_ctx", "_timer_service")

    def __init__(self, ctx: sc.Context | None) -> None:
        self._ctx: Any = ctx
        self._timer_service = None if ctx is None else ctx.timer_service

    def get_current_key(self) -> Any:
        return self._ctx.current_key

    def timestamp(self) -> int | None:
        """The element's event time (epoch ms; ``None`` without one), or the timer's."""
        return self._ctx.timestamp  # type: ignore[no-any-return]

    def timer_service(self) -> TimerService:
        return self._timer_service  # type: ignore[return-value]

    def output(self, output_tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``output_tag`` (PyFlink's or statecore's
        ``OutputTag``)."""
        self._ctx.output(output_tag, value)


class OnTimerContext(Context):
    """PyFlink's ``KeyedProcessFunction.OnTimerContext``: also the firing timer's domain."""

    __slots__ = ()

    def time_domain(self) -> TimeDomain:
        return self._ctx.time_domain  # type: ignore[no-any-return]


_UNBOUND = Context(None)
_UNBOUND_TIMER = OnTimerContext(None)
_CONTEXTS = ("_pyflink_context", "_pyflink_timer_context")


def _bind(function: Any, ctx: Any, kind: type[Context], slot: str) -> Context:
    """The PyFlink context of the task's ``ctx`` (made once per task context), or ``ctx``
    itself when it is a PyFlink context already (a ``super()`` call between PyFlink
    functions)."""
    if isinstance(ctx, Context):
        return ctx
    bound = kind(ctx)
    function.__dict__[slot] = bound
    return bound


def _adapt_open(user: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(user)
    def open(self: Any, runtime_context: Any) -> Any:
        if isinstance(runtime_context, sc.RuntimeContext):
            runtime_context = RuntimeContext(runtime_context)
        return user(self, runtime_context)

    return open


def _adapt_process_element(user: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(user)
    def process_element(self: Any, value: Any, ctx: Any) -> Any:
        context = self._pyflink_context
        if context._ctx is not ctx:
            context = _bind(self, ctx, Context, "_pyflink_context")
        return user(self, value, context)

    return process_element


def _adapt_on_timer(user: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(user)
    def on_timer(self: Any, timestamp: int, ctx: Any) -> Any:
        context = self._pyflink_timer_context
        if context._ctx is not ctx:
            context = _bind(self, ctx, OnTimerContext, "_pyflink_timer_context")
        return user(self, timestamp, context)

    return on_timer


_ADAPTERS = {
    "open": _adapt_open,
    "process_element": _adapt_process_element,
    "on_timer": _adapt_on_timer,
}


def _adapt_methods(cls: type, adapters: dict[str, Callable[..., Any]]) -> None:
    """Wrap, once, the methods ``cls`` itself defines that ``adapters`` name (a PyFlink-style
    subclass's ``open``, ``process_element``... get PyFlink's contexts)."""
    for name, adapt in adapters.items():
        method = cls.__dict__.get(name)
        if callable(method) and not getattr(method, "_pyflink_adapted", False):
            adapted = adapt(method)
            adapted._pyflink_adapted = True
            setattr(cls, name, adapted)


class KeyedProcessFunction(sc.KeyedProcessFunction):
    """PyFlink's ``KeyedProcessFunction``: ``open(runtime_context)``,
    ``process_element(value, ctx)`` and ``on_timer(timestamp, ctx)`` with PyFlink's contexts
    (see the module docstring); yield output rows."""

    Context = Context
    OnTimerContext = OnTimerContext

    _pyflink_context: Any = _UNBOUND
    _pyflink_timer_context: Any = _UNBOUND_TIMER

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _adapt_methods(cls, _ADAPTERS)

    def open(self, runtime_context: Any) -> None:
        """Declare state here (``runtime_context.get_state(...)``)."""

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        """Handle one element of the current key; yield output rows."""

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        """A timer of the current key fired; yield output rows."""
        return None

    def __getstate__(self) -> dict[str, Any]:
        """The function's attributes without the contexts bound to a task."""
        return {k: v for k, v in self.__dict__.items() if k not in _CONTEXTS}


class NonKeyedTimerService:
    """The timer service of a :class:`ProcessFunction`: the times; timers are keyed-only, as in
    Flink (registering one raises :class:`~statecore.errors.PyFlinkUnsupportedError`)."""

    __slots__ = ("_service",)

    def __init__(self, service: TimerService) -> None:
        self._service = service

    def current_processing_time(self) -> int:
        return self._service.current_processing_time()

    def current_watermark(self) -> int:
        return self._service.current_watermark()

    def _keyed_only(self, method: str) -> PyFlinkUnsupportedError:
        return PyFlinkUnsupportedError(
            f"timer_service().{method}: timers are only supported on keyed streams, as in "
            "Flink; key the stream (key_by) and use a KeyedProcessFunction "
            f"({COMING_FROM_PYFLINK})"
        )

    def register_event_time_timer(self, timestamp: int) -> None:
        raise self._keyed_only("register_event_time_timer")

    def register_processing_time_timer(self, timestamp: int) -> None:
        raise self._keyed_only("register_processing_time_timer")

    def delete_event_time_timer(self, timestamp: int) -> None:
        raise self._keyed_only("delete_event_time_timer")

    def delete_processing_time_timer(self, timestamp: int) -> None:
        raise self._keyed_only("delete_processing_time_timer")


class ProcessContext(Context):
    """PyFlink's ``ProcessFunction.Context``: the element's timestamp and the times (no key, no
    timers)."""

    __slots__ = ()

    def __init__(self, ctx: sc.Context | None) -> None:
        self._ctx = ctx
        self._timer_service = None if ctx is None else NonKeyedTimerService(ctx.timer_service)  # type: ignore[assignment]

    def get_current_key(self) -> Any:
        raise PyFlinkUnsupportedError(
            "ProcessFunction.Context has no key (a stream without key_by); a "
            f"KeyedProcessFunction's context has get_current_key() ({COMING_FROM_PYFLINK})"
        )

    def timer_service(self) -> NonKeyedTimerService:  # type: ignore[override]
        return self._timer_service  # type: ignore[return-value]


class ProcessFunction(Function, ABC):
    """PyFlink's ``ProcessFunction`` (``DataStream.process`` on a stream without a key):
    ``process_element(value, ctx)`` with ``ctx.timestamp()`` and
    ``ctx.timer_service().current_processing_time()`` / ``current_watermark()``; yield the
    outputs. Timers and keyed state are for keyed streams (a clear error here)."""

    Context = ProcessContext

    @abstractmethod
    def process_element(self, value: Any, ctx: ProcessContext) -> Iterable[Any] | None:
        """Handle one element; yield output elements."""

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        """Never called: a non-keyed stream has no timers."""
        return None


class CoMapFunction(Function, ABC):
    """PyFlink's ``CoMapFunction`` (``ConnectedStreams.map``): one element of either input in,
    one out."""

    @abstractmethod
    def map1(self, value: Any) -> Any: ...

    @abstractmethod
    def map2(self, value: Any) -> Any: ...


class CoFlatMapFunction(Function, ABC):
    """PyFlink's ``CoFlatMapFunction`` (``ConnectedStreams.flat_map``): yield any number of
    elements per element of either input."""

    @abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any]: ...

    @abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any]: ...


class CoProcessFunction(Function, ABC):
    """PyFlink's ``CoProcessFunction``, over connected streams that are not keyed: the context
    gives ``timestamp()``; keyed state and timers need keyed inputs (a
    :class:`KeyedCoProcessFunction` after ``key_by``) and raise
    :class:`~statecore.errors.PyFlinkUnsupportedError` here."""

    @abstractmethod
    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...


_CO_ADAPTERS = {
    "open": _adapt_open,
    "process_element1": _adapt_process_element,
    "process_element2": _adapt_process_element,
    "on_timer": _adapt_on_timer,
}


class KeyedCoProcessFunction(sc_co.KeyedCoProcessFunction):
    """PyFlink's ``KeyedCoProcessFunction``: ``process_element1``/``process_element2(value,
    ctx)`` and ``on_timer(timestamp, ctx)`` with PyFlink's contexts, over statecore's two-input
    runtime (:mod:`statecore.runtime.co_process`): both inputs share the key's state and
    timers."""

    Context = Context
    OnTimerContext = OnTimerContext

    _pyflink_context: Any = _UNBOUND
    _pyflink_timer_context: Any = _UNBOUND_TIMER

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _adapt_methods(cls, _CO_ADAPTERS)

    def open(self, runtime_context: Any) -> None:
        """Declare state here (``runtime_context.get_state(...)``); both inputs share it."""

    @abstractmethod
    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        """Handle one element of the first input; yield output rows."""

    @abstractmethod
    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        """Handle one element of the second input; yield output rows."""

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        """A timer of the current key fired; yield output rows."""
        return None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in _CONTEXTS}


class _WindowContext:
    """PyFlink's ``ProcessWindowFunction.Context`` around statecore's
    :class:`~statecore.runtime.windows.functions.WindowProcessContext`, with the window as
    PyFlink spells it (``window.max_timestamp()``)."""

    __slots__ = ("_ctx", "_window")

    def __class_getitem__(cls, item: Any) -> type[_WindowContext]:
        """``ProcessWindowFunction.Context[TimeWindow]`` in annotations, as PyFlink writes it."""
        return cls

    def __init__(self, ctx: Any, window: Any) -> None:
        self._ctx = ctx
        self._window = window

    def window(self) -> Any:
        return self._window

    def current_processing_time(self) -> int:
        return self._ctx.current_processing_time  # type: ignore[no-any-return]

    def current_watermark(self) -> int:
        return self._ctx.current_watermark  # type: ignore[no-any-return]

    def window_state(self) -> RuntimeContext:
        """State of this key and window (cleared in ``clear``), from PyFlink descriptors."""
        return RuntimeContext(self._ctx.window_state)

    def global_state(self) -> RuntimeContext:
        """State of this key across its windows, from PyFlink descriptors."""
        return RuntimeContext(self._ctx.global_state)

    def output(self, output_tag: Any, value: Any) -> None:
        self._ctx.output(output_tag, value)


class ProcessWindowFunction(Function, ABC):
    """PyFlink's ``ProcessWindowFunction``: ``process(key, context, elements)`` over a window's
    elements (or its reduced or aggregated value), with ``context.window()``; ``clear(context)``
    when the window is cleaned up."""

    Context = _WindowContext

    def __class_getitem__(cls, item: Any) -> type[ProcessWindowFunction]:
        """``ProcessWindowFunction[IN, OUT, KEY, W]``, as PyFlink's generic class is written."""
        return cls

    @abstractmethod
    def process(self, key: Any, context: Any, elements: Iterable[Any]) -> Iterable[Any]: ...

    def clear(self, context: Any) -> None:
        pass


class WindowFunction(Function, ABC):
    """PyFlink's ``WindowFunction``: ``apply(key, window, inputs)``."""

    def __class_getitem__(cls, item: Any) -> type[WindowFunction]:
        """``WindowFunction[IN, OUT, KEY, W]``, as PyFlink's generic class is written."""
        return cls

    @abstractmethod
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any]: ...


class ProcessAllWindowFunction(Function, ABC):
    """PyFlink's ``ProcessAllWindowFunction`` (``window_all(...).process``):
    ``process(context, elements)`` over a window of the whole stream, with
    ``context.window()``; ``clear(context)`` when the window is cleaned up."""

    Context = _WindowContext

    def __class_getitem__(cls, item: Any) -> type[ProcessAllWindowFunction]:
        return cls

    @abstractmethod
    def process(self, context: Any, elements: Iterable[Any]) -> Iterable[Any]: ...

    def clear(self, context: Any) -> None:
        pass


class AllWindowFunction(Function, ABC):
    """PyFlink's ``AllWindowFunction`` (``window_all(...).apply``): ``apply(window, inputs)``."""

    def __class_getitem__(cls, item: Any) -> type[AllWindowFunction]:
        return cls

    @abstractmethod
    def apply(self, window: Any, inputs: Iterable[Any]) -> Iterable[Any]: ...


class BaseBroadcastProcessFunction(Function, ABC):
    """PyFlink's base of the broadcast process functions (``connect`` of a stream with a
    ``BroadcastStream``): their contexts are
    :mod:`statecore.pyflink.datastream.broadcast_context`'s."""

    BaseContext = broadcast_context.ReadOnlyContext
    Context = broadcast_context.BroadcastContext
    ReadOnlyContext = broadcast_context.ReadOnlyContext


class BroadcastProcessFunction(BaseBroadcastProcessFunction):
    """PyFlink's ``BroadcastProcessFunction``: a stream without a key meets a broadcast
    stream. ``process_element(value, ctx)`` reads the broadcast state;
    ``process_broadcast_element(value, ctx)`` (on every parallel instance) writes it. Yield
    the outputs."""

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction):
    """PyFlink's ``KeyedBroadcastProcessFunction``: a keyed stream meets a broadcast stream.
    ``process_element(value, ctx)`` has the key's state and timers and reads the broadcast
    state; ``process_broadcast_element(value, ctx)`` writes it and may visit every key's state
    (``ctx.apply_to_keyed_state``); ``on_timer(timestamp, ctx)`` fires the key's timers."""

    ReadOnlyContext = broadcast_context.KeyedReadOnlyContext
    OnTimerContext = broadcast_context.KeyedOnTimerContext

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: Any) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        """A timer of the current key fired; yield output rows."""
        return None
