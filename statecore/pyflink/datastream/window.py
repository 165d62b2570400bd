"""PyFlink's ``pyflink.datastream.window``: window assigners, triggers, evictors and windows,
mapped onto statecore's windows (:mod:`statecore.runtime.windows`).

The assigners' factories (``TumblingEventTimeWindows.of(Time.seconds(5))``) give statecore's
assigners; the built-in triggers and evictors (``CountTrigger.of(3)``) statecore's. A custom
PyFlink :class:`Trigger` (``on_element``, ``on_event_time``, ``on_processing_time``,
``on_merge``, ``clear`` with PyFlink's trigger context) runs through an adapter, and the window
functions get windows as PyFlink spells them (:class:`TimeWindow` with ``max_timestamp()``).

>>> from statecore.pyflink.common.time import Time
>>> TumblingEventTimeWindows.of(Time.seconds(5)).assign_windows(7_000, now=0)
[TimeWindow(5000, 10000)]
>>> TimeWindow(0, 5000).max_timestamp(), TimeWindow(0, 5000)
(4999, TimeWindow(start=0, end=5000))
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Any

from statecore.backends.timers import MAX_WATERMARK
from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.common.time import Time, to_timedelta
from statecore.pyflink.datastream.functions import (
    AllWindowFunction,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    RuntimeContext,
    WindowFunction,
    _statecore,
    _WindowContext,
)
from statecore.runtime import windows as sc
from statecore.runtime.windows.triggers import TriggerResult

__all__ = [
    "TimeWindow",
    "GlobalWindow",
    "CountWindow",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "EventTimeSessionWindows",
    "ProcessingTimeSessionWindows",
    "SessionWindowTimeGapExtractor",
    "GlobalWindows",
    "Trigger",
    "TriggerResult",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "CountTrigger",
    "PurgingTrigger",
    "CountEvictor",
    "TimeEvictor",
]


# -- windows, as PyFlink's functions see them -----------------------------------------------
class TimeWindow:
    """PyFlink's ``TimeWindow``: ``start``, ``end`` and ``max_timestamp()``."""

    __slots__ = ("start", "end")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimeWindow) and (self.start, self.end) == (other.start, other.end)

    def __hash__(self) -> int:
        return hash((self.start, self.end))

    def __repr__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"


class GlobalWindow:
    """PyFlink's ``GlobalWindow`` (``GlobalWindow.get()``)."""

    __slots__ = ()

    @staticmethod
    def get() -> GlobalWindow:
        return GlobalWindow()

    def max_timestamp(self) -> int:
        return MAX_WATERMARK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GlobalWindow)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "GlobalWindow"


class CountWindow:
    """PyFlink's ``CountWindow``; statecore's count windows are global windows with a count
    trigger (as Java Flink's ``countWindow``), so functions see a :class:`GlobalWindow`."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:
        self.id = id

    def max_timestamp(self) -> int:
        return MAX_WATERMARK

    def __repr__(self) -> str:
        return f"CountWindow(id={self.id})"


def pyflink_window(window: sc.Window) -> Any:
    """``window`` as PyFlink's functions see it."""
    if isinstance(window, sc.TimeWindow):
        return TimeWindow(window.start, window.end)
    return GlobalWindow()


# -- assigners ---------------------------------------------------------------------------------
def _span(span: Time | timedelta | None) -> timedelta:
    return timedelta(0) if span is None else to_timedelta(span)


class TumblingEventTimeWindows:
    @staticmethod
    def of(size: Time, offset: Time | None = None) -> sc.WindowAssigner:
        return sc.TumblingWindows(size=_span(size), offset=_span(offset))


class TumblingProcessingTimeWindows:
    @staticmethod
    def of(size: Time, offset: Time | None = None) -> sc.WindowAssigner:
        return sc.TumblingWindows(size=_span(size), offset=_span(offset), processing_time=True)


class SlidingEventTimeWindows:
    @staticmethod
    def of(size: Time, slide: Time, offset: Time | None = None) -> sc.WindowAssigner:
        return sc.SlidingWindows(size=_span(size), slide=_span(slide), offset=_span(offset))


class SlidingProcessingTimeWindows:
    @staticmethod
    def of(size: Time, slide: Time, offset: Time | None = None) -> sc.WindowAssigner:
        return sc.SlidingWindows(
            size=_span(size), slide=_span(slide), offset=_span(offset), processing_time=True
        )


class SessionWindowTimeGapExtractor(ABC):
    """PyFlink's ``SessionWindowTimeGapExtractor``: ``extract(element)`` gives the session gap
    (milliseconds) an element opens (``with_dynamic_gap``)."""

    @abstractmethod
    def extract(self, element: Any) -> int: ...


def _gap_extractor(extractor: Any) -> Any:
    extract = getattr(extractor, "extract", extractor)
    if not callable(extract):
        raise PyFlinkUnsupportedError(
            f"with_dynamic_gap({extractor!r}): give a SessionWindowTimeGapExtractor "
            f"(extract(element) -> milliseconds) ({COMING_FROM_PYFLINK})"
        )
    return extract


class EventTimeSessionWindows:
    @staticmethod
    def with_gap(size: Time) -> sc.WindowAssigner:
        return sc.SessionWindows(gap=_span(size))

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor) -> sc.WindowAssigner:
        return sc.DynamicSessionWindows(gap_extractor=_gap_extractor(extractor))


class ProcessingTimeSessionWindows:
    @staticmethod
    def with_gap(size: Time) -> sc.WindowAssigner:
        return sc.SessionWindows(gap=_span(size), processing_time=True)

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor) -> sc.WindowAssigner:
        return sc.DynamicSessionWindows(
            gap_extractor=_gap_extractor(extractor), processing_time=True
        )


class GlobalWindows:
    @staticmethod
    def create() -> sc.WindowAssigner:
        return sc.GlobalWindows()


# -- triggers and evictors ----------------------------------------------------------------------
class EventTimeTrigger:
    @staticmethod
    def create() -> sc.Trigger:
        return sc.EventTimeTrigger()


class ProcessingTimeTrigger:
    @staticmethod
    def create() -> sc.Trigger:
        return sc.ProcessingTimeTrigger()


class CountTrigger:
    @staticmethod
    def of(window_size: int) -> sc.Trigger:
        return sc.CountTrigger(window_size)


class PurgingTrigger:
    @staticmethod
    def of(nested_trigger: Any) -> sc.Trigger:
        return sc.PurgingTrigger(statecore_trigger(nested_trigger))


class CountEvictor:
    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> sc.Evictor:
        return sc.CountEvictor(max_count, after=do_evict_after)


class TimeEvictor:
    @staticmethod
    def of(window_size: Time, do_evict_after: bool = False) -> sc.Evictor:
        return sc.TimeEvictor(keep=_span(window_size), after=do_evict_after)


class Trigger(ABC):
    """PyFlink's ``Trigger``: subclass it for a custom trigger; its context is PyFlink's
    (``ctx.get_current_watermark()``, ``ctx.register_event_time_timer(t)``,
    ``ctx.get_partitioned_state(descriptor)``)."""

    TriggerContext: Any = None
    OnMergeContext: Any = None

    @abstractmethod
    def on_element(
        self, element: Any, timestamp: int | None, window: Any, ctx: Any
    ) -> TriggerResult: ...

    @abstractmethod
    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult: ...

    @abstractmethod
    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult: ...

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: Any, ctx: Any) -> None:
        pass

    @abstractmethod
    def clear(self, window: Any, ctx: Any) -> None: ...


class _TriggerContext:
    """PyFlink's ``Trigger.TriggerContext`` (and ``OnMergeContext``) around statecore's."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def get_current_processing_time(self) -> int:
        return self._ctx.current_processing_time  # type: ignore[no-any-return]

    def get_current_watermark(self) -> int:
        return self._ctx.current_watermark  # type: ignore[no-any-return]

    def get_metric_group(self) -> Any:
        raise PyFlinkUnsupportedError(f"statecore has no metric groups ({COMING_FROM_PYFLINK})")

    def register_processing_time_timer(self, time: int) -> None:
        self._ctx.register_processing_time_timer(time)

    def register_event_time_timer(self, time: int) -> None:
        self._ctx.register_event_time_timer(time)

    def delete_processing_time_timer(self, time: int) -> None:
        self._ctx.delete_processing_time_timer(time)

    def delete_event_time_timer(self, time: int) -> None:
        self._ctx.delete_event_time_timer(time)

    def get_partitioned_state(self, state_descriptor: Any) -> Any:
        return self._ctx.get_partitioned_state(_statecore(state_descriptor))

    def merge_partitioned_state(self, state_descriptor: Any) -> None:
        self._ctx.merge_partitioned_state(_statecore(state_descriptor))


Trigger.TriggerContext = _TriggerContext
Trigger.OnMergeContext = _TriggerContext


class _AdaptedTrigger(sc.Trigger):
    """A PyFlink :class:`Trigger` run by statecore's window operator."""

    def __init__(self, trigger: Trigger) -> None:
        self.trigger = trigger

    def on_element(
        self, element: Any, timestamp: int | None, window: sc.Window, ctx: Any
    ) -> TriggerResult:
        return self.trigger.on_element(
            element, timestamp, pyflink_window(window), _TriggerContext(ctx)
        )

    def on_event_time(self, time: int, window: sc.Window, ctx: Any) -> TriggerResult:
        return self.trigger.on_event_time(time, pyflink_window(window), _TriggerContext(ctx))

    def on_processing_time(self, time: int, window: sc.Window, ctx: Any) -> TriggerResult:
        return self.trigger.on_processing_time(time, pyflink_window(window), _TriggerContext(ctx))

    def can_merge(self) -> bool:
        return self.trigger.can_merge()

    def on_merge(self, window: sc.Window, ctx: Any) -> None:
        self.trigger.on_merge(pyflink_window(window), _TriggerContext(ctx))

    def clear(self, window: sc.Window, ctx: Any) -> None:
        self.trigger.clear(pyflink_window(window), _TriggerContext(ctx))


def statecore_trigger(trigger: Any) -> sc.Trigger:
    """statecore's trigger for a built-in or a PyFlink custom trigger."""
    if isinstance(trigger, sc.Trigger):
        return trigger
    if isinstance(trigger, Trigger):
        return _AdaptedTrigger(trigger)
    raise PyFlinkUnsupportedError(
        f"trigger({trigger!r}): give a Trigger (CountTrigger.of(n), PurgingTrigger.of(...), "
        f"or a subclass of Trigger) ({COMING_FROM_PYFLINK})"
    )


# -- window functions ---------------------------------------------------------------------------
class _AdaptedProcessWindowFunction(sc.ProcessWindowFunction):
    """A PyFlink ``ProcessWindowFunction`` run by statecore's window operator."""

    def __init__(self, function: ProcessWindowFunction) -> None:
        self.function = function

    def open(self, runtime_context: Any) -> None:
        self.function.open(RuntimeContext(runtime_context))

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        wrapped = _WindowContext(context, pyflink_window(context.window))
        return self.function.process(key, wrapped, elements)

    def clear(self, context: Any) -> None:
        self.function.clear(_WindowContext(context, pyflink_window(context.window)))

    def close(self) -> None:
        self.function.close()


class _AdaptedWindowFunction(sc.WindowFunction):
    """A PyFlink ``WindowFunction`` run by statecore's window operator."""

    def __init__(self, function: WindowFunction) -> None:
        self.function = function

    def open(self, runtime_context: Any) -> None:
        self.function.open(RuntimeContext(runtime_context))

    def apply(self, key: Any, window: sc.Window, inputs: Any) -> Any:
        return self.function.apply(key, pyflink_window(window), inputs)

    def close(self) -> None:
        self.function.close()


class _AdaptedProcessAllWindowFunction(_AdaptedProcessWindowFunction):
    """A PyFlink ``ProcessAllWindowFunction`` (``window_all``): the one key left out."""

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        wrapped = _WindowContext(context, pyflink_window(context.window))
        return self.function.process(wrapped, elements)  # type: ignore[call-arg]


class _AdaptedAllWindowFunction(_AdaptedWindowFunction):
    """A PyFlink ``AllWindowFunction`` (``window_all``): the one key left out."""

    def apply(self, key: Any, window: sc.Window, inputs: Any) -> Any:
        return self.function.apply(pyflink_window(window), inputs)  # type: ignore[call-arg]


def statecore_window_function(
    function: Any,
) -> sc.ProcessWindowFunction | sc.WindowFunction | None:
    """statecore's window function for a PyFlink one (``None`` passes)."""
    if function is None:
        return None
    if isinstance(function, ProcessWindowFunction):
        return _AdaptedProcessWindowFunction(function)
    if isinstance(function, WindowFunction):
        return _AdaptedWindowFunction(function)
    if isinstance(function, ProcessAllWindowFunction):
        return _AdaptedProcessAllWindowFunction(function)  # type: ignore[arg-type]
    if isinstance(function, AllWindowFunction):
        return _AdaptedAllWindowFunction(function)  # type: ignore[arg-type]
    raise PyFlinkUnsupportedError(
        f"window function {function!r}: give a ProcessWindowFunction or a WindowFunction "
        "(a ProcessAllWindowFunction or an AllWindowFunction after window_all) "
        f"(from statecore.pyflink.datastream.functions) ({COMING_FROM_PYFLINK})"
    )
