"""Evictors: which elements leave a window before or after its function runs (Flink's
``Evictor``).

A window with an evictor keeps its elements (each with its timestamp) in list state, since an
evictor needs them one by one. ``evict_before`` and ``evict_after`` get that list and remove
from it in place what leaves the window for good.

>>> from datetime import timedelta
>>> elements = [TimestampedValue(v, t) for v, t in [("a", 1000), ("b", 2000), ("c", 5000)]]
>>> TimeEvictor(keep=timedelta(seconds=4)).evict_before(elements, None, None)
>>> ", ".join(e.value for e in elements)
'b, c'
>>> CountEvictor(1).evict_before(elements, None, None); ", ".join(e.value for e in elements)
'c'
"""

from __future__ import annotations

from abc import ABC
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NamedTuple

from statecore.errors import ConfigError
from statecore.runtime.windows.assigners import millis
from statecore.runtime.windows.windows import Window

__all__ = ["TimestampedValue", "Evictor", "CountEvictor", "TimeEvictor"]


class TimestampedValue(NamedTuple):
    """An element of an evicting window with its event time (``None`` without one)."""

    value: Any
    timestamp: int | None


class Evictor(ABC):  # noqa: B024 - both hooks are optional, as in Flink
    """Removes elements from a window's list in place; subclass it for a custom evictor."""

    def evict_before(
        self, elements: list[TimestampedValue], window: Window | None, ctx: Any
    ) -> None:
        """Before the window function sees ``elements``."""

    def evict_after(
        self, elements: list[TimestampedValue], window: Window | None, ctx: Any
    ) -> None:
        """After the window function saw ``elements``."""


@dataclass(frozen=True)
class CountEvictor(Evictor):
    """Keeps the last ``count`` elements (before the function, or after it with ``after``)."""

    count: int
    after: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise ConfigError(f"a count evictor keeps a count >= 0, got {self.count!r}")

    def _evict(self, elements: list[TimestampedValue]) -> None:
        if len(elements) > self.count:
            del elements[: len(elements) - self.count]

    def evict_before(
        self, elements: list[TimestampedValue], window: Window | None, ctx: Any
    ) -> None:
        if not self.after:
            self._evict(elements)

    def evict_after(
        self, elements: list[TimestampedValue], window: Window | None, ctx: Any
    ) -> None:
        if self.after:
            self._evict(elements)


@dataclass(frozen=True)
class TimeEvictor(Evictor):
    """Keeps the elements within ``keep`` of the latest element's timestamp (elements at or
    before ``latest - keep`` leave), before the function or after it with ``after``."""

    keep: timedelta
    after: bool = False
    _keep: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        keep = millis(self.keep, "keep")
        if keep < 0:
            raise ConfigError(f"a time evictor keeps a duration >= 0, got {keep} ms")
        object.__setattr__(self, "_keep", keep)

    def _evict(self, elements: list[TimestampedValue]) -> None:
        times = [e.timestamp for e in elements if e.timestamp is not None]
        if not times:
            return
        cutoff = max(times) - self._keep
        elements[:] = [e for e in elements if e.timestamp is None or e.timestamp > cutoff]

    def evict_before(
        self, elements: list[TimestampedValue], window: Window | None, ctx: Any
    ) -> None:
        if not self.after:
            self._evict(elements)

    def evict_after(
        self, elements: list[TimestampedValue], window: Window | None, ctx: Any
    ) -> None:
        if self.after:
            self._evict(elements)
