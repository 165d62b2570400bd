"""A plain model of Flink's ``WindowOperator``, and the window operators it is compared with.

The model (:class:`WindowModel`) states Flink's window semantics directly, for one operator
over many keys: each key's windows with their elements in a dict, the trigger's count per
window in another, the timers as a set of ``(timestamp, key, window)``, the session windows of
each key as a set. No code of statecore's runtime is used.

- **Assigners**: tumbling windows of 10 ms, sliding windows of 10 ms every 5 ms, session
  windows with a 7 ms gap (a new window merges with each open window of its key it overlaps
  or touches), and the global window (not event time: never late, never cleaned up).
- **Triggers**: ``event`` (Flink's ``EventTimeTrigger``: a timer at the window's last
  millisecond; an element of a window the watermark passed fires it at once), ``count``
  (``CountTrigger(n)``: fires at every ``n``-th element since it last fired, counts merge with
  the windows), and their ``purging_`` forms (``PurgingTrigger``: every fire also empties the
  window).
- **Lateness**: a window is cleaned up (its elements, its count, gone) by a timer at its last
  millisecond plus the allowed lateness; a window whose cleanup time the watermark reached
  takes no element, and an element all of whose windows are so is late: it goes to the late
  side output (``late``).
- **Functions**: what a fired window emits, as text: ``process`` its values sorted, ``reduce``
  their sum, ``aggregate`` their sum and count; nothing when the window is empty.

Outputs are compared as multisets: Flink fixes no order among windows firing at one watermark.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from statecore.descriptors import AggregateFunction
from statecore.runtime.side_outputs import OutputTag
from statecore.types import PICKLED
from statecore.windows import (
    CountTrigger,
    EventTimeTrigger,
    GlobalWindows,
    ProcessWindowFunction,
    PurgingTrigger,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    WindowOperator,
    window,
)

__all__ = [
    "ASSIGNERS",
    "FUNCTIONS",
    "LATE",
    "WindowModel",
    "WindowSpec",
    "operator",
    "result_text",
    "window_specs",
]

MIN = -(1 << 63)
MAX = (1 << 63) - 1
GLOBAL = (MIN, MAX)
"""The global window, as ``(start, end)`` (the output shows it as ``(-1, -1)``)."""
ASSIGNERS = ("tumbling", "sliding", "session", "global")
FUNCTIONS = ("process", "reduce", "aggregate")
TRIGGERS = ("event", "count", "purging_event", "purging_count")
LATE = OutputTag("late")

Element = tuple[int, int, int]
"""An element: its program, its step (unique in the program) and its value."""
Window = tuple[int, int]
Fired = tuple[str, int, int, str]
"""What a window emitted: the key, the window's start and end, the result as text."""


@dataclass(frozen=True)
class WindowSpec:
    assigner: str
    trigger: str
    count: int
    lateness: int
    function: str

    @property
    def event_time(self) -> bool:
        return self.assigner != "global"


def window_specs(
    function: str, assigners: tuple[str, ...] = ASSIGNERS
) -> st.SearchStrategy[WindowSpec]:
    """Each of ``assigners`` with each trigger it takes (the global window needs a count
    trigger)."""

    def spec(assigner: str) -> st.SearchStrategy[WindowSpec]:
        triggers = TRIGGERS if assigner != "global" else ("count", "purging_count")
        return st.builds(
            WindowSpec,
            st.just(assigner),
            st.sampled_from(triggers),
            st.integers(1, 3),
            st.sampled_from([0, 6]) if assigner != "global" else st.just(0),
            st.just(function),
        )

    return st.sampled_from(assigners).flatmap(spec)


def result_text(function: str, values: Iterable[int]) -> str:
    """A fired window's result as its function makes it."""
    values = list(values)
    if function == "process":
        return repr(sorted(values))
    if function == "reduce":
        return repr(sum(values))
    return repr((sum(values), len(values)))


# -- the model ----------------------------------------------------------------------------
@dataclass
class WindowModel:
    """One window operator (``spec``) over every key of a program."""

    spec: WindowSpec
    watermark: int = MIN
    contents: dict[tuple[str, Window], list[int]] = field(default_factory=dict)
    counts: dict[tuple[str, Window], int] = field(default_factory=dict)
    timers: set[tuple[int, str, Window]] = field(default_factory=set)
    sessions: set[tuple[str, Window]] = field(default_factory=set)
    late: list[Element] = field(default_factory=list)

    # -- assigner ---------------------------------------------------------------------------
    def assign(self, ts: int) -> list[Window]:
        kind = self.spec.assigner
        if kind == "tumbling":
            return [(ts - ts % 10, ts - ts % 10 + 10)]
        if kind == "sliding":
            last = ts - ts % 5
            return [(last, last + 10), (last - 5, last + 5)]
        if kind == "session":
            return [(ts, ts + 7)]
        return [GLOBAL]

    @staticmethod
    def max_timestamp(window: Window) -> int:
        return MAX if window == GLOBAL else window[1] - 1

    def cleanup_time(self, window: Window) -> int:
        if not self.spec.event_time:
            return MAX
        return self.max_timestamp(window) + self.spec.lateness

    def window_late(self, window: Window) -> bool:
        return self.spec.event_time and self.cleanup_time(window) <= self.watermark

    # -- trigger ----------------------------------------------------------------------------
    @property
    def _purging(self) -> bool:
        return self.spec.trigger.startswith("purging_")

    @property
    def _counting(self) -> bool:
        return self.spec.trigger.endswith("count")

    def on_element(self, key: str, window: Window) -> tuple[bool, bool]:
        """The trigger's answer, as (fire, purge)."""
        if self._counting:
            seen = self.counts.get((key, window), 0) + 1
            if seen >= self.spec.count:
                self.counts.pop((key, window), None)
                return True, self._purging
            self.counts[(key, window)] = seen
            return False, False
        if self.max_timestamp(window) <= self.watermark:
            return True, self._purging
        self.timers.add((self.max_timestamp(window), key, window))
        return False, False

    def on_event_time(self, time: int, window: Window) -> tuple[bool, bool]:
        if not self._counting and time == self.max_timestamp(window):
            return True, self._purging
        return False, False

    def on_merge(self, key: str, result: Window, merged: list[Window]) -> None:
        if self._counting:
            total = sum(self.counts.pop((key, w), 0) for w in [result, *merged])
            if total:
                self.counts[(key, result)] = total
        elif self.max_timestamp(result) > self.watermark:
            self.timers.add((self.max_timestamp(result), key, result))

    def clear_trigger(self, key: str, window: Window) -> None:
        if self._counting:
            self.counts.pop((key, window), None)
        else:
            self.timers.discard((self.max_timestamp(window), key, window))

    # -- the operator -----------------------------------------------------------------------
    def element(self, key: str, element: Element, ts: int) -> list[Fired]:
        """An element of ``key`` with timestamp ``ts``: what fired."""
        out: list[Fired] = []
        skipped = True
        for assigned in self.assign(ts):
            w = assigned
            if self.spec.assigner == "session":
                w = self.add_session(key, assigned)
                if self.window_late(w):
                    self.sessions.discard((key, w))
                    continue
            elif self.window_late(w):
                continue
            skipped = False
            self.contents.setdefault((key, w), []).append(element[2])
            self.act(key, w, *self.on_element(key, w), out)
            if self.cleanup_time(w) != MAX:
                self.timers.add((self.cleanup_time(w), key, w))
        if skipped and self.spec.event_time and ts + self.spec.lateness <= self.watermark:
            self.late.append(element)
        return out

    def add_session(self, key: str, new: Window) -> Window:
        """``new`` merged with the key's open sessions it overlaps or touches (open sessions
        never touch each other): the session it is now in."""
        touching = sorted(
            w for k, w in self.sessions if k == key and w[0] <= new[1] and w[1] >= new[0]
        )
        result = (
            min([new[0], *(w[0] for w in touching)]),
            max([new[1], *(w[1] for w in touching)]),
        )
        if touching and touching != [result]:
            if self.max_timestamp(result) + self.spec.lateness <= self.watermark:
                raise AssertionError("a merge ended a window before the watermark")
            self.on_merge(key, result, touching)
            elements = [v for w in touching for v in self.contents.pop((key, w), [])]
            for merged in touching:
                self.clear_trigger(key, merged)
                self.timers.discard((self.cleanup_time(merged), key, merged))
                self.sessions.discard((key, merged))
            if elements:
                self.contents.setdefault((key, result), []).extend(elements)
        self.sessions.add((key, result))
        return result

    def act(self, key: str, window: Window, fire: bool, purge: bool, out: list[Fired]) -> None:
        if fire and self.contents.get((key, window)):
            start, end = (-1, -1) if window == GLOBAL else window
            out.append(
                (key, start, end, result_text(self.spec.function, self.contents[(key, window)]))
            )
        if purge:
            self.contents.pop((key, window), None)

    def advance(self, watermark: int) -> list[Fired]:
        """The watermark moves to ``watermark`` (never back): every timer at or below it fires,
        lowest first."""
        self.watermark = max(self.watermark, watermark)
        out: list[Fired] = []
        while self.timers:
            time, key, window = min(self.timers)
            if time > self.watermark:
                break
            self.timers.discard((time, key, window))
            if self.spec.assigner == "session" and (key, window) not in self.sessions:
                continue  # a timer of a window merged away
            self.act(key, window, *self.on_event_time(time, window), out)
            if self.spec.event_time and time == self.cleanup_time(window):
                self.contents.pop((key, window), None)
                self.clear_trigger(key, window)
                self.sessions.discard((key, window))
        return out


# -- the operator under test ----------------------------------------------------------------
def add_elements(a: Element, b: Element) -> Element:
    """``reduce``'s function over elements: the values summed."""
    return (a[0], min(a[1], b[1]), a[2] + b[2])


class SumCount(AggregateFunction[Element, dict[str, int], tuple[int, int]]):
    def create_accumulator(self) -> dict[str, int]:
        return {"sum": 0, "count": 0}

    def add(self, value: Element, acc: dict[str, int]) -> dict[str, int]:
        return {"sum": acc["sum"] + value[2], "count": acc["count"] + 1}

    def get_result(self, acc: dict[str, int]) -> tuple[int, int]:
        return (acc["sum"], acc["count"])

    def merge(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        return {"sum": a["sum"] + b["sum"], "count": a["count"] + b["count"]}


class Emit(ProcessWindowFunction):
    """A fired window as :data:`Fired` (the key, the window, the result as text)."""

    def __init__(self, function: str) -> None:
        self.function = function

    def process(self, key: Any, context: Any, elements: Any) -> Iterator[Fired]:
        w = context.window
        start, end = (w.start, w.end) if hasattr(w, "start") else (-1, -1)
        inputs = list(elements)
        if self.function == "process":
            text = result_text("process", (e[2] for e in inputs))
        elif self.function == "reduce":
            ((_, _, total),) = inputs
            text = repr(total)
        else:
            ((total, count),) = inputs
            text = repr((total, count))
        yield key, start, end, text


def operator(spec: WindowSpec) -> WindowOperator:
    """statecore's window operator for ``spec`` (elements pickled, late ones to :data:`LATE`)."""
    ms = timedelta(milliseconds=1)
    assigner: Any = {
        "tumbling": TumblingWindows(size=10 * ms),
        "sliding": SlidingWindows(size=10 * ms, slide=5 * ms),
        "session": SessionWindows(gap=7 * ms),
        "global": GlobalWindows(),
    }[spec.assigner]
    base: Any = CountTrigger(spec.count) if spec.trigger.endswith("count") else EventTimeTrigger()
    trigger = PurgingTrigger(base) if spec.trigger.startswith("purging_") else base
    windowing = window(
        assigner,
        element_type=PICKLED,
        trigger=trigger,
        allowed_lateness=spec.lateness * ms,
        late_data=LATE,
    )
    emit = Emit(spec.function)
    if spec.function == "reduce":
        return windowing.reduce(add_elements, function=emit)
    if spec.function == "aggregate":
        accumulator = pa.struct([("sum", pa.int64()), ("count", pa.int64())])
        return windowing.aggregate(SumCount(), accumulator_type=accumulator, function=emit)
    return windowing.process(emit)
