"""The window operator: an assigner, a trigger, an optional evictor and a window function over
one keyed state whose namespace is the window (Flink's ``WindowOperator`` and
``EvictingWindowOperator``), as a :class:`~statecore.runtime.functions.KeyedProcessFunction`.

For each element the assigner names its windows; the element is added to each window's
contents (state ``window_contents`` in the window's namespace, e.g. ``TimeWindow(0, 5000)``)
and the trigger decides whether the window fires. Each window has a cleanup timer at its end
plus the allowed lateness (event time) or its end (processing time): then its contents, its
trigger state and its function's per-window state are cleared. A window whose cleanup time
the watermark passed takes no more elements: an element that falls only into such windows is
late, dropped or sent to the late-data side output. Since windows are plain keyed state and
timers, open windows are checkpointed, restored and rescaled with the key, and at the end of a
bounded input (the watermark at ``MAX_WATERMARK``) every event-time window fires.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from statecore.backends.timers import MAX_WATERMARK, TimeDomain
from statecore.descriptors import StateDescriptor
from statecore.errors import StateAccessError
from statecore.runtime.functions import (
    Context,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
)
from statecore.runtime.windows.assigners import (
    DynamicSessionWindows,
    GlobalWindows,
    MergingWindowAssigner,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    WindowAssigner,
)
from statecore.runtime.windows.evictors import Evictor, TimestampedValue
from statecore.runtime.windows.functions import (
    ProcessWindowFunction,
    WindowContents,
    WindowFunction,
    WindowProcessContext,
    evicting_descriptor,
)
from statecore.runtime.windows.merging import MERGING, MergingWindowSet
from statecore.runtime.windows.triggers import Trigger, TriggerResult
from statecore.runtime.windows.windows import Window, window_of

__all__ = ["WindowOperator", "WindowTriggerContext"]

_CONTINUE = TriggerResult.CONTINUE
_CLOCKLESS = (TumblingWindows, SlidingWindows, SessionWindows, DynamicSessionWindows, GlobalWindows)
"""The assigners whose event-time windows do not read the processing time."""
_WINDOWS_KEPT = 4096
"""How many windows :meth:`WindowOperator._window_of` keeps parsed (then it starts over)."""


class WindowTriggerContext:
    """The trigger's view of the current key and one window: timers and state in the window's
    namespace (Flink's ``WindowOperator.Context``)."""

    def __init__(self, runtime_context: RuntimeContext) -> None:
        self._runtime_context = runtime_context
        self._timers = runtime_context.backend.timer_service
        self.window: Window | None = None
        self.merged_windows: list[Window] = []
        self.event_timer_window: Window | None = None
        """The window whose event-time timer at :attr:`event_timer_time` this context last
        registered (``None`` after a delete): the operator skips registering it again as the
        cleanup timer, which the timer service would ignore as already registered."""
        self.event_timer_time = 0

    @property
    def _namespace(self) -> str:
        assert self.window is not None
        return self.window.namespace

    @property
    def current_watermark(self) -> int:
        return self._timers.current_watermark()

    @property
    def current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def register_event_time_timer(self, timestamp: int) -> None:
        self._timers.register_event_time_timer(timestamp, self._namespace)
        self.event_timer_window, self.event_timer_time = self.window, timestamp

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._timers.register_processing_time_timer(timestamp, self._namespace)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._timers.delete_event_time_timer(timestamp, self._namespace)
        self.event_timer_window = None

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._timers.delete_processing_time_timer(timestamp, self._namespace)

    def get_partitioned_state(self, descriptor: StateDescriptor) -> Any:
        state = self._runtime_context.backend.get_partitioned_state(descriptor)
        state.set_current_namespace(self._namespace)
        return state

    def merge_partitioned_state(self, descriptor: StateDescriptor) -> None:
        if self.merged_windows:
            state = self.get_partitioned_state(descriptor)
            state.merge_namespaces(self._namespace, [w.namespace for w in self.merged_windows])


class WindowOperator(KeyedProcessFunction):
    """Windows over a keyed stream; build one with :func:`statecore.windows.window` rather than
    by hand. ``contents`` keeps what ``function`` gets (``None``: emit the reduced or aggregated
    value itself); ``allowed_lateness`` is in ms; ``late_data`` is a side-output tag for late
    elements (``None``: dropped)."""

    def __init__(
        self,
        assigner: WindowAssigner,
        contents: WindowContents,
        function: ProcessWindowFunction | WindowFunction | None = None,
        *,
        trigger: Trigger | None = None,
        evictor: Evictor | None = None,
        allowed_lateness: int = 0,
        late_data: Any = None,
    ) -> None:
        self.assigner = assigner
        self.contents = contents
        self.function = function
        self.trigger = assigner.default_trigger() if trigger is None else trigger
        self.evictor = evictor
        self.allowed_lateness = allowed_lateness
        self.late_data = late_data
        self.late_records_dropped = 0
        """Late elements dropped by this instance (no late-data tag)."""

    # -- lifecycle ---------------------------------------------------------------------------
    def open(self, runtime_context: RuntimeContext) -> None:
        self.runtime_context = runtime_context
        descriptor = (
            self.contents.descriptor
            if self.evictor is None
            else evicting_descriptor(self.contents.element_type)
        )
        self.window_state: Any = runtime_context.backend.get_partitioned_state(descriptor)
        self.merging_state: Any = (
            runtime_context.get_map_state(MERGING)
            if isinstance(self.assigner, MergingWindowAssigner)
            else None
        )
        self.trigger_context = WindowTriggerContext(runtime_context)
        self._timers = runtime_context.backend.timer_service
        self._event_time = self.assigner.is_event_time
        # the built-in assigners read the processing time only for processing-time windows
        self._needs_now = not (self._event_time and type(self.assigner) in _CLOCKLESS)
        self._clears_function_state = (
            isinstance(self.function, ProcessWindowFunction)
            and type(self.function).clear is not ProcessWindowFunction.clear
        )
        self._windows_by_namespace: dict[str, Window] = {}
        if self.function is not None:
            self.function.open(runtime_context)

    def close(self) -> None:
        if self.function is not None:
            self.function.close()

    # -- elements ----------------------------------------------------------------------------
    def process_element(self, value: Any, ctx: Context) -> Iterable[Any] | None:
        timestamp = ctx.timestamp
        now = self._timers.current_processing_time() if self._needs_now else 0
        windows = self.assigner.assign_element_windows(value, timestamp, now=now)
        out: list[Any] = []
        skipped = True
        merging = self._merging_windows()
        context = self.trigger_context
        state = self.window_state
        event_time = self._event_time
        watermark = self._timers.watermark  # no element moves it
        for window in windows:
            if merging is not None:
                window = merging.add_window(
                    window, lambda *args: self._merge(ctx.current_key, *args)
                )
                cleanup = self._cleanup_time(window)
                if event_time and cleanup <= watermark:  # late: cleaned up already
                    merging.retire_window(window)
                    continue
                state_window = merging.state_window(window)
                assert state_window is not None
            else:
                cleanup = self._cleanup_time(window)
                if event_time and cleanup <= watermark:
                    continue
                state_window = window
            skipped = False
            state.set_current_namespace(state_window.namespace)
            if self.evictor is None:
                state.add(value)
            else:
                state.add({"value": value, "timestamp": timestamp})
            context.window = window
            context.event_timer_window = None
            result = self.trigger.on_element(value, timestamp, window, context)
            if result is not _CONTINUE:
                self._act(result, ctx.current_key, window, state_window, ctx, out)
            self._register_cleanup_timer(window, cleanup)
        if merging is not None:
            merging.persist()
        if skipped and self._is_element_late(timestamp):
            if self.late_data is not None:
                ctx.output(self.late_data, value)
            else:
                self.late_records_dropped += 1
        return out

    def _merging_windows(self) -> MergingWindowSet | None:
        if self.merging_state is None:
            return None
        assert isinstance(self.assigner, MergingWindowAssigner)
        return MergingWindowSet(self.assigner, self.merging_state)

    def _merge(
        self,
        key: Any,
        result: Window,
        merged: list[Window],
        state_window: Window,
        merged_state_windows: list[Window],
    ) -> None:
        if self.assigner.is_event_time:
            late = (
                result.max_timestamp + self.allowed_lateness
                <= self.trigger_context.current_watermark
            )
        else:
            late = result.max_timestamp <= self.trigger_context.current_processing_time
        if late:
            raise StateAccessError(
                f"key {key!r}: merging into {result} would end a window before the current "
                "time (a trigger or assigner merged windows backwards)"
            )
        context = self.trigger_context
        context.window, context.merged_windows = result, merged
        self.trigger.on_merge(result, context)
        context.merged_windows = []
        for window in merged:
            context.window = window
            self.trigger.clear(window, context)
            self._delete_cleanup_timer(window)
        self.window_state.set_current_namespace(state_window.namespace)
        self.window_state.merge_namespaces(
            state_window.namespace, [w.namespace for w in merged_state_windows]
        )

    # -- timers ------------------------------------------------------------------------------
    def _window_of(self, namespace: str) -> Window:
        """The window of a timer's namespace, parsed once per namespace (a tumbling window's
        namespace is shared by every key)."""
        windows = self._windows_by_namespace
        window = windows.get(namespace)
        if window is None:
            if len(windows) >= _WINDOWS_KEPT:
                windows.clear()
            window = windows[namespace] = window_of(namespace)
        return window

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterable[Any] | None:
        window = self._window_of(ctx.namespace)
        event_time = ctx.time_domain is TimeDomain.EVENT_TIME
        merging = self._merging_windows()
        if merging is not None:
            state_window = merging.state_window(window)
            if state_window is None:
                return None  # a timer of a window merged away whose trigger kept it
        else:
            state_window = window
        context = self.trigger_context
        context.window = window
        if event_time:
            result = self.trigger.on_event_time(timestamp, window, context)
        else:
            result = self.trigger.on_processing_time(timestamp, window, context)
        out: list[Any] = []
        self._act(result, ctx.current_key, window, state_window, ctx, out)
        if event_time == self._event_time and timestamp == self._cleanup_time(window):
            self._clear_all_state(window, state_window, merging, ctx)
        if merging is not None:
            merging.persist()
        return out

    # -- firing ------------------------------------------------------------------------------
    def _act(
        self,
        result: TriggerResult,
        key: Any,
        window: Window,
        state_window: Window,
        ctx: Context,
        out: list[Any],
    ) -> None:
        state = self.window_state
        state.set_current_namespace(state_window.namespace)
        if result.is_fire:
            self._emit(key, window, ctx, out)
        if result.is_purge:
            state.set_current_namespace(state_window.namespace)
            state.clear()

    def _emit(self, key: Any, window: Window, ctx: Context, out: list[Any]) -> None:
        state = self.window_state
        if self.evictor is None:
            inputs = self.contents.inputs(state)
            if inputs is not None:
                self._call(key, window, ctx, inputs, out)
            return
        stored = state.get()
        if not stored:
            return
        elements = [TimestampedValue(e["value"], e["timestamp"]) for e in stored]
        self.evictor.evict_before(elements, window, self.trigger_context)
        self._call(key, window, ctx, self.contents.fold([e.value for e in elements]), out)
        self.evictor.evict_after(elements, window, self.trigger_context)
        state.update([{"value": e.value, "timestamp": e.timestamp} for e in elements])

    def _call(
        self, key: Any, window: Window, ctx: Context, inputs: list[Any], out: list[Any]
    ) -> None:
        function = self.function
        if function is None:
            out.extend(inputs)
            return
        if isinstance(function, ProcessWindowFunction):
            result = function.process(
                key, WindowProcessContext(self.runtime_context, window, ctx), inputs
            )
        else:
            result = function.apply(key, window, inputs)
        if result is not None:
            out.extend(result)

    # -- cleanup -----------------------------------------------------------------------------
    def _cleanup_time(self, window: Window) -> int:
        if self._event_time:
            return min(window.max_timestamp + self.allowed_lateness, MAX_WATERMARK)
        return window.max_timestamp

    def _register_cleanup_timer(self, window: Window, cleanup: int) -> None:
        """Registers ``window``'s cleanup timer at ``cleanup`` (its :meth:`_cleanup_time`)."""
        if cleanup == MAX_WATERMARK:
            return  # a window that never ends (global) is never cleaned up
        context = self.trigger_context
        if self._event_time:
            if context.event_timer_window is window and context.event_timer_time == cleanup:
                return  # the trigger just registered it (the default: no allowed lateness)
            context.window = window
            context.register_event_time_timer(cleanup)
        else:
            self.trigger_context.register_processing_time_timer(cleanup)

    def _delete_cleanup_timer(self, window: Window) -> None:
        cleanup = self._cleanup_time(window)
        if cleanup == MAX_WATERMARK:
            return
        self.trigger_context.window = window
        if self._event_time:
            self.trigger_context.delete_event_time_timer(cleanup)
        else:
            self.trigger_context.delete_processing_time_timer(cleanup)

    def _clear_all_state(
        self, window: Window, state_window: Window, merging: MergingWindowSet | None, ctx: Context
    ) -> None:
        self.window_state.set_current_namespace(state_window.namespace)
        self.window_state.clear()
        self.trigger_context.window = window
        self.trigger.clear(window, self.trigger_context)
        if self._clears_function_state:
            assert isinstance(self.function, ProcessWindowFunction)
            self.function.clear(WindowProcessContext(self.runtime_context, window, ctx))
        if merging is not None:
            merging.retire_window(window)

    def _is_element_late(self, timestamp: int | None) -> bool:
        return (
            self._event_time
            and timestamp is not None
            and timestamp + self.allowed_lateness <= self._timers.watermark
        )
