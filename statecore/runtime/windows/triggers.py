"""Triggers: when a window's contents are emitted (fired) and dropped (purged), Flink's ``Trigger``.

The window operator calls a trigger for each element added to a window, for each timer of the
window and when windows merge; the trigger answers with a :class:`TriggerResult`. A trigger
keeps its own state per window through ``ctx.get_partitioned_state(descriptor)`` (scoped to the
window's namespace) and registers timers through ``ctx``; ``clear`` removes both when the
window is cleaned up.

>>> from statecore.runtime.windows.windows import TimeWindow
>>> TriggerResult.FIRE_AND_PURGE.is_fire, TriggerResult.FIRE_AND_PURGE.is_purge
(True, True)
"""

from __future__ import annotations

import enum
import operator
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

from statecore.descriptors import ReducingStateDescriptor, StateDescriptor
from statecore.errors import ConfigError
from statecore.runtime.windows.windows import Window

__all__ = [
    "TriggerResult",
    "TriggerContext",
    "OnMergeContext",
    "Trigger",
    "EventTimeTrigger",
    "ProcessingTimeTrigger",
    "CountTrigger",
    "PurgingTrigger",
    "NeverTrigger",
]


class TriggerResult(enum.Enum):
    """What happens to a window: nothing, emitted, emptied, or both."""

    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    def __init__(self, fire: bool, purge: bool) -> None:
        # plain attributes: the operator reads them for every element and timer, and an
        # enum's ``value`` is a descriptor lookup
        self.is_fire = fire
        self.is_purge = purge


class TriggerContext(Protocol):
    """What a trigger may use: the clocks, timers of the current key and window, and state
    scoped to the window."""

    @property
    def current_watermark(self) -> int: ...

    @property
    def current_processing_time(self) -> int: ...

    def register_event_time_timer(self, timestamp: int) -> None: ...

    def register_processing_time_timer(self, timestamp: int) -> None: ...

    def delete_event_time_timer(self, timestamp: int) -> None: ...

    def delete_processing_time_timer(self, timestamp: int) -> None: ...

    def get_partitioned_state(self, descriptor: StateDescriptor) -> Any: ...


class OnMergeContext(TriggerContext, Protocol):
    """The context of ``on_merge``: also merges the merged windows' trigger state."""

    def merge_partitioned_state(self, descriptor: StateDescriptor) -> None: ...


class Trigger(ABC):
    """Decides when a window fires; subclass it for a custom trigger."""

    @abstractmethod
    def on_element(
        self, element: Any, timestamp: int | None, window: Window, ctx: TriggerContext
    ) -> TriggerResult:
        """An element was added to ``window``."""

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        """An event-time timer of ``window`` fired."""
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        """A processing-time timer of ``window`` fired."""
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        """Whether this trigger supports merging windows (``on_merge``)."""
        return False

    def on_merge(self, window: Window, ctx: OnMergeContext) -> None:
        """Windows merged into ``window``: re-register timers, merge trigger state."""
        raise ConfigError(f"{type(self).__name__} does not support merging (session) windows")

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        """``window`` is cleaned up: delete its timers and trigger state."""


@dataclass(frozen=True)
class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (the event-time assigners' default)."""

    def on_element(
        self, element: Any, timestamp: int | None, window: Window, ctx: TriggerContext
    ) -> TriggerResult:
        if window.max_timestamp <= ctx.current_watermark:
            return TriggerResult.FIRE  # a late element of a window kept by allowed lateness
        ctx.register_event_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: OnMergeContext) -> None:
        if window.max_timestamp > ctx.current_watermark:
            ctx.register_event_time_timer(window.max_timestamp)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp)


@dataclass(frozen=True)
class ProcessingTimeTrigger(Trigger):
    """Fires when the task's clock passes the window's end (the processing-time default)."""

    def on_element(
        self, element: Any, timestamp: int | None, window: Window, ctx: TriggerContext
    ) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: OnMergeContext) -> None:
        if window.max_timestamp > ctx.current_processing_time:
            ctx.register_processing_time_timer(window.max_timestamp)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp)


_COUNT = ReducingStateDescriptor("window_trigger_count", operator.add, int)


@dataclass(frozen=True)
class CountTrigger(Trigger):
    """Fires each time ``count`` elements reached the window since it last fired; the count is
    trigger state of the window (state ``window_trigger_count``)."""

    count: int

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ConfigError(f"a count trigger needs a positive count, got {self.count!r}")

    def on_element(
        self, element: Any, timestamp: int | None, window: Window, ctx: TriggerContext
    ) -> TriggerResult:
        seen = ctx.get_partitioned_state(_COUNT)
        seen.add(1)
        if seen.get() >= self.count:
            seen.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: OnMergeContext) -> None:
        ctx.merge_partitioned_state(_COUNT)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.get_partitioned_state(_COUNT).clear()


@dataclass(frozen=True)
class PurgingTrigger(Trigger):
    """Another trigger whose every fire also purges the window."""

    trigger: Trigger

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire else result

    def on_element(
        self, element: Any, timestamp: int | None, window: Window, ctx: TriggerContext
    ) -> TriggerResult:
        return self._purging(self.trigger.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.trigger.can_merge()

    def on_merge(self, window: Window, ctx: OnMergeContext) -> None:
        self.trigger.on_merge(window, ctx)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        self.trigger.clear(window, ctx)


@dataclass(frozen=True)
class NeverTrigger(Trigger):
    """Never fires (the global windows' default: set a trigger to see anything)."""

    def on_element(
        self, element: Any, timestamp: int | None, window: Window, ctx: TriggerContext
    ) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: OnMergeContext) -> None:
        return None
