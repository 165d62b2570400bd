"""Event-time windows through the harness against a model of Flink's window semantics:
tumbling, sliding and session (merging) windows, allowed lateness, late elements, the
watermark advancing, and snapshots restored on the other backend mid-program.

The model (:class:`WindowModel`) is Flink's ``WindowOperator`` with its default
``EventTimeTrigger`` stated directly: an element goes to each of its windows whose cleanup time
(end - 1 + lateness) the watermark has not reached (session windows first merge with the key's
open windows they touch); a window already past its end fires at once (a late element within
the lateness); the watermark fires each window whose end - 1 it reaches and removes those
whose cleanup time it reaches. Outputs are compared per step as multisets (the order among
windows firing at one timestamp is the timer queue's).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statecore.testing import KeyedProcessFunctionHarness
from statecore.types import PICKLED
from statecore.windows import (
    ProcessWindowFunction,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    WindowOperator,
    window,
)

from .keyed import backend_parameters

PROFILE = settings(
    settings.get_profile("reference_model"),
    # a quarter of the profile's examples: each opens harnesses (RocksDB ones too) per restore
    max_examples=max(settings.get_profile("reference_model").max_examples // 4, 20),
)
MS = timedelta(milliseconds=1)

Command = namedtuple("Command", "op key value timestamp")


class Describe(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        yield key, context.window.start, context.window.end, tuple(sorted(elements))


class WithWindow(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        ((_, total),) = elements
        yield key, context.window.start, context.window.end, total


@dataclass
class WindowModel:
    kind: str
    lateness: int
    watermark: int = -(1 << 63)
    open: dict[tuple[str, int, int], list[int]] = field(default_factory=dict)

    def assign(self, ts: int) -> list[tuple[int, int]]:
        if self.kind == "tumbling":
            start = ts - ts % 10
            return [(start, start + 10)]
        if self.kind == "sliding":
            last = ts - ts % 5
            return [(s, s + 10) for s in (last, last - 5)]
        return [(ts, ts + 7)]

    def cleanup(self, end: int) -> int:
        return end - 1 + self.lateness

    def element(self, key: str, value: int, ts: int) -> list[tuple[Any, ...]]:
        out = []
        for start, end in self.assign(ts):
            if self.kind == "session":
                start, end = self.merge(key, start, end)
            if self.cleanup(end) <= self.watermark:
                continue
            contents = self.open.setdefault((key, start, end), [])
            contents.append(value)
            if end - 1 <= self.watermark:
                out.append((key, start, end, sorted(contents)))
        return out

    def merge(self, key: str, start: int, end: int) -> tuple[int, int]:
        """The session the new window [start, end) ends up in: it and every open window of the
        key it touches (open windows never touch each other) merged into one."""
        touching = [w for w in self.open if w[0] == key and w[1] <= end and w[2] >= start]
        if not touching:
            return start, end
        merged = [v for w in touching for v in self.open.pop(w)]
        start = min([start, *(w[1] for w in touching)])
        end = max([end, *(w[2] for w in touching)])
        self.open[(key, start, end)] = merged
        return start, end

    def advance(self, watermark: int) -> list[tuple[Any, ...]]:
        out = []
        if watermark <= self.watermark:
            return out
        for (key, start, end), contents in list(self.open.items()):
            if self.watermark < end - 1 <= watermark:
                out.append((key, start, end, sorted(contents)))
            if self.cleanup(end) <= watermark:
                del self.open[(key, start, end)]
        self.watermark = watermark
        return out


def commands() -> st.SearchStrategy[list[Command]]:
    element = st.builds(
        Command,
        st.just("element"),
        st.sampled_from("abc"),
        st.integers(1, 9),
        st.integers(0, 60),
    )
    advance = st.builds(Command, st.just("advance"), st.just(""), st.just(0), st.integers(0, 70))
    restore = st.just(Command("restore", "", 0, 0))
    return st.lists(st.one_of(element, element, advance, restore), max_size=30)


def make(kind: str, lateness: int, incremental: bool) -> WindowOperator:
    assigner: Any = {
        "tumbling": TumblingWindows(size=10 * MS),
        "sliding": SlidingWindows(size=10 * MS, slide=5 * MS),
        "session": SessionWindows(gap=7 * MS),
    }[kind]
    windowing = window(assigner, element_type=PICKLED, allowed_lateness=lateness * MS)
    if incremental:
        return windowing.reduce(lambda a, b: (a[0], a[1] + b[1]), function=WithWindow())
    return windowing.process(Describe())


def normalized(rows: list[tuple[Any, ...]], incremental: bool) -> list[tuple[Any, ...]]:
    if incremental:
        return sorted(rows)
    return sorted((k, s, e, list(v)) for k, s, e, v in rows)


@PROFILE
@given(
    kind=st.sampled_from(["tumbling", "sliding", "session"]),
    lateness=st.sampled_from([0, 6]),
    incremental=st.booleans(),
    first_backend=st.sampled_from(["heap", "rocksdb"]),
    program=commands(),
)
def test_reference_model_window_operator_matches_flinks_windows(
    kind: str, lateness: int, incremental: bool, first_backend: str, program: list[Command]
) -> None:
    model = WindowModel(kind, lateness)
    backend = first_backend

    def open_harness(restore: Any = None) -> KeyedProcessFunctionHarness:
        return KeyedProcessFunctionHarness(
            make(kind, lateness, incremental),
            key=lambda e: e[0],
            backend=backend_parameters(backend),
            restore=restore,
        )

    harness = open_harness()
    try:
        for command in program:
            if command.op == "element":
                got = harness.process_element((command.key, command.value), command.timestamp)
                got = [(k, s, e, v) for k, s, e, v in got]
                expected = model.element(command.key, command.value, command.timestamp)
            elif command.op == "advance":
                watermark = max(command.timestamp, harness.watermark)
                got = harness.advance_watermark(watermark)
                expected = model.advance(watermark)
            else:
                saved = harness.snapshot()
                harness.close()
                backend = "rocksdb" if backend == "heap" else "heap"
                harness = open_harness(saved)
                continue
            if incremental:
                expected = [(k, s, e, sum(v)) for k, s, e, v in expected]
                assert sorted(got) == sorted(expected), command
            else:
                got = [(k, s, e, [x[1] for x in v]) for k, s, e, v in got]
                assert sorted(got) == sorted(expected), command
        end = harness.end_input()
        expected = model.advance((1 << 63) - 1)
        if incremental:
            assert sorted(end) == sorted((k, s, e, sum(v)) for k, s, e, v in expected)
        else:
            got = [(k, s, e, [x[1] for x in v]) for k, s, e, v in end]
            assert sorted(got) == sorted(expected)
        assert harness.timers() == []
    finally:
        harness.close()
