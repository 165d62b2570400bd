"""Window assigners: which windows an element falls into (Flink's ``WindowAssigner``).

Sizes are ``timedelta`` s; windows are epoch milliseconds. Each assigner follows event time (the
element's timestamp, fired by the watermark) or processing time (the task's clock, fired by
processing-time timers), and names the trigger a window gets unless the user sets another.

>>> from datetime import timedelta
>>> TumblingWindows(size=timedelta(seconds=5)).assign_windows(7_000, now=0)
[TimeWindow(5000, 10000)]
>>> sliding = SlidingWindows(size=timedelta(seconds=10), slide=timedelta(seconds=5))
>>> sliding.assign_windows(7_000, now=0)
[TimeWindow(5000, 15000), TimeWindow(0, 10000)]
>>> SessionWindows(gap=timedelta(seconds=3)).assign_windows(7_000, now=0)
[TimeWindow(7000, 10000)]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from statecore.errors import ConfigError
from statecore.runtime.windows.triggers import (
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    Trigger,
)
from statecore.runtime.windows.windows import (
    GlobalWindow,
    TimeWindow,
    Window,
    merge_time_windows,
    window_start_with_offset,
)

__all__ = [
    "WindowAssigner",
    "MergingWindowAssigner",
    "TumblingWindows",
    "SlidingWindows",
    "SessionWindows",
    "DynamicSessionWindows",
    "GlobalWindows",
    "millis",
]


def millis(duration: timedelta | int, what: str) -> int:
    """``duration`` in whole milliseconds (an int is taken as milliseconds)."""
    if isinstance(duration, bool) or not isinstance(duration, (timedelta, int)):
        raise ConfigError(f"{what} must be a timedelta, got {duration!r}")
    if isinstance(duration, int):
        return duration
    return (duration.days * 86_400_000) + duration.seconds * 1000 + duration.microseconds // 1000


class WindowAssigner(ABC):
    """Assigns each element zero or more windows."""

    @abstractmethod
    def assign_windows(self, timestamp: int | None, *, now: int) -> list[Window]:
        """The windows of an element with event time ``timestamp`` (epoch ms) at processing
        time ``now``."""

    def assign_element_windows(
        self, element: Any, timestamp: int | None, *, now: int
    ) -> list[Window]:
        """The windows of ``element`` (Flink's ``assignWindows(element, timestamp, context)``):
        those of :meth:`assign_windows`, unless the assigner reads the element (a dynamic
        session gap)."""
        return self.assign_windows(timestamp, now=now)

    @abstractmethod
    def default_trigger(self) -> Trigger:
        """The trigger a window gets unless one is set."""

    @property
    @abstractmethod
    def is_event_time(self) -> bool:
        """Whether windows follow event time (the watermark) rather than processing time."""

    def _time(self, timestamp: int | None, now: int) -> int:
        if not self.is_event_time:
            return now
        if timestamp is None:
            raise ConfigError(
                f"{type(self).__name__} assigns event-time windows, and an element has no "
                "timestamp: give the job an event-time column (or use processing_time=True)"
            )
        return timestamp


class MergingWindowAssigner(WindowAssigner):
    """An assigner whose windows merge (session windows)."""

    @abstractmethod
    def merge_windows(self, windows: list[Window]) -> list[tuple[Window, list[Window]]]:
        """Each merge result with the windows it covers (a window alone is its own result)."""


def _time_trigger(is_event_time: bool) -> Trigger:
    return EventTimeTrigger() if is_event_time else ProcessingTimeTrigger()


@dataclass(frozen=True)
class TumblingWindows(WindowAssigner):
    """Fixed-size, non-overlapping windows, aligned to the epoch plus ``offset``."""

    size: timedelta
    offset: timedelta = timedelta(0)
    processing_time: bool = False
    _size: int = field(init=False, repr=False)
    _offset: int = field(init=False, repr=False)
    _last: tuple[int, Window] | None = field(init=False, repr=False, compare=False, default=None)
    """The last window assigned, by its start: consecutive elements mostly share a window, and
    one window object keeps its namespace computed once."""

    def __post_init__(self) -> None:
        size, offset = millis(self.size, "size"), millis(self.offset, "offset")
        if size <= 0 or abs(offset) >= size:
            raise ConfigError(
                f"tumbling windows need 0 < size and |offset| < size (got size {size} ms, "
                f"offset {offset} ms)"
            )
        object.__setattr__(self, "_size", size)
        object.__setattr__(self, "_offset", offset)

    @property
    def is_event_time(self) -> bool:
        return not self.processing_time

    def assign_windows(self, timestamp: int | None, *, now: int) -> list[Window]:
        start = window_start_with_offset(self._time(timestamp, now), self._offset, self._size)
        last = self._last
        if last is not None and last[0] == start:
            return [last[1]]
        window = TimeWindow(start, start + self._size)
        object.__setattr__(self, "_last", (start, window))
        return [window]

    def default_trigger(self) -> Trigger:
        return _time_trigger(self.is_event_time)


@dataclass(frozen=True)
class SlidingWindows(WindowAssigner):
    """Windows of ``size`` starting every ``slide``: an element falls into ``size / slide`` of
    them (latest first, as Flink assigns them)."""

    size: timedelta
    slide: timedelta
    offset: timedelta = timedelta(0)
    processing_time: bool = False
    _size: int = field(init=False, repr=False)
    _slide: int = field(init=False, repr=False)
    _offset: int = field(init=False, repr=False)
    _last: tuple[int, int, tuple[Window, ...]] | None = field(
        init=False, repr=False, compare=False, default=None
    )
    """The last windows assigned, by the latest one's start and their number (as
    :class:`TumblingWindows`)."""

    def __post_init__(self) -> None:
        size, slide = millis(self.size, "size"), millis(self.slide, "slide")
        offset = millis(self.offset, "offset")
        if size <= 0 or slide <= 0 or abs(offset) >= slide:
            raise ConfigError(
                f"sliding windows need 0 < size, 0 < slide and |offset| < slide (got size "
                f"{size} ms, slide {slide} ms, offset {offset} ms)"
            )
        object.__setattr__(self, "_size", size)
        object.__setattr__(self, "_slide", slide)
        object.__setattr__(self, "_offset", offset)

    @property
    def is_event_time(self) -> bool:
        return not self.processing_time

    def assign_windows(self, timestamp: int | None, *, now: int) -> list[Window]:
        time = self._time(timestamp, now)
        last_start = window_start_with_offset(time, self._offset, self._slide)
        # how many windows hold ``time``: with a size not a multiple of the slide, it depends on
        # where in its slide ``time`` falls, so it is part of what the cache compares
        count = -(-(self._size - (time - last_start)) // self._slide)
        last = self._last
        if last is not None and last[0] == last_start and last[1] == count:
            return list(last[2])
        windows: list[Window] = []
        start = last_start
        while start > time - self._size:
            windows.append(TimeWindow(start, start + self._size))
            start -= self._slide
        object.__setattr__(self, "_last", (last_start, count, tuple(windows)))
        return windows

    def default_trigger(self) -> Trigger:
        return _time_trigger(self.is_event_time)


@dataclass(frozen=True)
class SessionWindows(MergingWindowAssigner):
    """A window per burst of activity: an element opens ``[t, t + gap)`` and windows that
    overlap merge, so a session closes after ``gap`` without elements."""

    gap: timedelta
    processing_time: bool = False
    _gap: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        gap = millis(self.gap, "gap")
        if gap <= 0:
            raise ConfigError(f"session windows need a positive gap (got {gap} ms)")
        object.__setattr__(self, "_gap", gap)

    @property
    def is_event_time(self) -> bool:
        return not self.processing_time

    def assign_windows(self, timestamp: int | None, *, now: int) -> list[Window]:
        time = self._time(timestamp, now)
        return [TimeWindow(time, time + self._gap)]

    def merge_windows(self, windows: list[Window]) -> list[tuple[Window, list[Window]]]:
        time_windows = [w for w in windows if isinstance(w, TimeWindow)]
        return [(cover, list(members)) for cover, members in merge_time_windows(time_windows)]

    def default_trigger(self) -> Trigger:
        return _time_trigger(self.is_event_time)


@dataclass(frozen=True)
class DynamicSessionWindows(MergingWindowAssigner):
    """Session windows whose gap each element gives (Flink's ``withDynamicGap``):
    ``gap_extractor(element)`` is a ``timedelta`` or milliseconds, and must be positive (else a
    :class:`~statecore.errors.ConfigError` naming the element). An element opens
    ``[t, t + its gap)``; windows that overlap merge.

    >>> sessions = DynamicSessionWindows(gap_extractor=lambda e: e[1])
    >>> sessions.assign_element_windows(("a", 3_000), 7_000, now=0)
    [TimeWindow(7000, 10000)]
    """

    gap_extractor: Callable[[Any], timedelta | int]
    processing_time: bool = False

    @property
    def is_event_time(self) -> bool:
        return not self.processing_time

    def assign_windows(self, timestamp: int | None, *, now: int) -> list[Window]:
        raise ConfigError("session windows with a dynamic gap assign windows per element")

    def assign_element_windows(
        self, element: Any, timestamp: int | None, *, now: int
    ) -> list[Window]:
        gap = self.gap_extractor(element)
        if isinstance(gap, bool) or not isinstance(gap, (timedelta, int)):
            raise ConfigError(
                f"the session gap extractor gave {gap!r} for element {element!r}: give a "
                "timedelta or milliseconds"
            )
        ms = millis(gap, "a session gap")
        if ms <= 0:
            raise ConfigError(
                f"the session gap extractor gave {ms} ms for element {element!r}: a session "
                "gap must be positive"
            )
        time = self._time(timestamp, now)
        return [TimeWindow(time, time + ms)]

    def merge_windows(self, windows: list[Window]) -> list[tuple[Window, list[Window]]]:
        time_windows = [w for w in windows if isinstance(w, TimeWindow)]
        return [(cover, list(members)) for cover, members in merge_time_windows(time_windows)]

    def default_trigger(self) -> Trigger:
        return _time_trigger(self.is_event_time)


@dataclass(frozen=True)
class GlobalWindows(WindowAssigner):
    """Every element of a key in one window, which never fires unless a trigger says so
    (count windows are global windows with a count trigger)."""

    def assign_windows(self, timestamp: int | None, *, now: int) -> list[Window]:
        return [GlobalWindow()]

    @property
    def is_event_time(self) -> bool:
        return False

    def default_trigger(self) -> Trigger:
        return NeverTrigger()
