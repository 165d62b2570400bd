"""The windows a keyed stream's elements fall into: :class:`TimeWindow` and :class:`GlobalWindow`.

A window is a value: it names the namespace of the keyed state that holds its contents (a
readable string, so a checkpoint's tables show each key's open windows in SQL) and the timers
registered for it. :func:`window_of` reads a namespace back into its window.

>>> w = TimeWindow(1000, 2000)
>>> w.max_timestamp, w.namespace, window_of(w.namespace) == w
(1999, 'TimeWindow(1000, 2000)', True)
>>> for merged, members in merge_time_windows([TimeWindow(0, 10), TimeWindow(5, 15),
...                                            TimeWindow(20, 30)]):
...     print(merged, members)
TimeWindow(0, 15) [TimeWindow(0, 10), TimeWindow(5, 15)]
TimeWindow(20, 30) [TimeWindow(20, 30)]
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from statecore.backends.timers import MAX_WATERMARK
from statecore.errors import ConfigError

__all__ = [
    "Window",
    "TimeWindow",
    "GlobalWindow",
    "window_of",
    "merge_time_windows",
    "window_start_with_offset",
]


class Window:
    """A window: its state namespace and the largest timestamp that belongs to it."""

    __slots__ = ()

    @property
    def max_timestamp(self) -> int:
        raise NotImplementedError

    @property
    def namespace(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True, order=True)
class TimeWindow(Window):
    """The half-open interval ``[start, end)`` of epoch milliseconds (Flink's ``TimeWindow``)."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ConfigError(f"a time window ends after it starts: [{self.start}, {self.end})")
        # computed once: the operator reads both for every element and timer of the window
        object.__setattr__(self, "_max_timestamp", self.end - 1)
        object.__setattr__(self, "_namespace", f"TimeWindow({self.start}, {self.end})")

    def __setstate__(self, state: dict[str, int]) -> None:
        # a window pickled before the two were cached has only ``start`` and ``end``
        self.__dict__.update(state)
        self.__post_init__()

    @property
    def max_timestamp(self) -> int:
        return self._max_timestamp  # type: ignore[no-any-return,attr-defined]

    @property
    def namespace(self) -> str:
        return self._namespace  # type: ignore[no-any-return,attr-defined]

    def intersects(self, other: TimeWindow) -> bool:
        """Whether the two windows overlap or touch (session windows that touch merge)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window holding both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    def __repr__(self) -> str:
        return self.namespace


@dataclass(frozen=True)
class GlobalWindow(Window):
    """The one window of every element of a key (count windows are global windows)."""

    @property
    def max_timestamp(self) -> int:
        return MAX_WATERMARK

    @property
    def namespace(self) -> str:
        return "GlobalWindow"

    def __repr__(self) -> str:
        return self.namespace


_TIME_WINDOW = re.compile(r"TimeWindow\((-?\d+), (-?\d+)\)")


def window_of(namespace: str) -> Window:
    """The window whose state namespace is ``namespace``."""
    if namespace == "GlobalWindow":
        return GlobalWindow()
    match = _TIME_WINDOW.fullmatch(namespace)
    if match is None:
        raise ConfigError(f"state namespace {namespace!r} names no window")
    return TimeWindow(int(match.group(1)), int(match.group(2)))


def window_start_with_offset(timestamp: int, offset: int, size: int) -> int:
    """The start of the window of ``size`` (shifted by ``offset``) that holds ``timestamp``
    (Flink's ``TimeWindow.getWindowStartWithOffset``)."""
    remainder = (timestamp - offset) % size
    return timestamp - remainder


def merge_time_windows(
    windows: Iterable[TimeWindow],
) -> list[tuple[TimeWindow, list[TimeWindow]]]:
    """Overlapping windows merged (Flink's ``TimeWindow.mergeWindows``): each merge result with
    the windows it covers, sorted by start."""
    merged: list[tuple[TimeWindow, list[TimeWindow]]] = []
    for window in sorted(windows):
        if merged and merged[-1][0].intersects(window):
            cover, members = merged[-1]
            merged[-1] = (cover.cover(window), [*members, window])
        else:
            merged.append((window, [window]))
    return merged
