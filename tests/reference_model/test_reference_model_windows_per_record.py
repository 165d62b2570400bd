"""The window operator's per-element fast paths (issue 43) against the model of Flink's
``WindowOperator`` (:mod:`.windows`), on both backends: windows reused by the assigners, a
window's namespace computed once, the trigger's timer not registered twice as the cleanup
timer, timer windows parsed once per namespace, no clock read for the built-in event-time
assigners, a window function's ``clear`` called only when it has one.

Each program runs through :func:`.test_reference_model_windows`'s property (its body, without
Hypothesis) on fixed programs that make the fast paths matter: runs of elements in one window,
then timestamps going back to an earlier window, late elements, and restores on the other
backend mid-window.
"""

from __future__ import annotations

import copy
import operator
import pickle
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

import statecore.runtime.windows.operator as window_operator_module
from statecore.backends.timers import TimeDomain
from statecore.testing import KeyedProcessFunctionHarness
from statecore.types import PICKLED
from statecore.windows import (
    ProcessWindowFunction,
    SlidingWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingWindows,
    WindowAssigner,
    window,
)

from . import test_reference_model_windows as reference
from .windows import WindowSpec

MS = timedelta(milliseconds=1)
Command = reference.Command
matches_the_model = reference.test_reference_model_window_operator_matches_flinks_windows


def program() -> list[Command]:
    """Three keys; timestamps mostly rising (runs of elements in one window), then wrapping
    back to windows the watermark passed (late, or kept by the lateness); watermarks, and two
    restores on the other backend."""
    commands: list[Command] = []
    for i in range(42):
        timestamp = (i * 3) % 50 if i % 7 else max(0, i * 3 - 25)
        commands.append(Command("element", "abc"[i % 3], 1 + i % 9, timestamp))
        if i % 6 == 5:
            commands.append(Command("advance", "", 0, max(0, i * 3 - 8)))
        if i in (17, 31):
            commands.append(Command("restore", "", 0, 0))
    return commands


SPECS = [
    WindowSpec("tumbling", "event", 1, 0, "aggregate"),
    WindowSpec("tumbling", "event", 1, 6, "reduce"),
    WindowSpec("tumbling", "purging_count", 2, 0, "process"),
    WindowSpec("sliding", "event", 1, 0, "process"),
    WindowSpec("sliding", "purging_event", 1, 6, "aggregate"),
    WindowSpec("sliding", "count", 3, 6, "reduce"),
    WindowSpec("session", "event", 1, 6, "aggregate"),
    WindowSpec("session", "count", 2, 0, "process"),
    WindowSpec("global", "count", 2, 0, "reduce"),
    WindowSpec("global", "purging_count", 3, 0, "aggregate"),
]


@pytest.mark.parametrize("first_backend", ["heap", "rocksdb"])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.assigner}-{s.trigger}-{s.lateness}")
def test_per_record_window_operator_matches_the_model(spec: WindowSpec, first_backend: str) -> None:
    matches_the_model.hypothesis.inner_test(  # type: ignore[attr-defined]
        spec=spec, first_backend=first_backend, program=program()
    )


@pytest.mark.parametrize("first_backend", ["heap", "rocksdb"])
def test_per_record_timer_windows_parsed_again_once_the_cache_is_full(
    first_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two windows kept: the program's timers name more, so the cache starts over mid-program
    monkeypatch.setattr(window_operator_module, "_WINDOWS_KEPT", 2)
    for spec in (SPECS[1], SPECS[4], SPECS[6]):
        matches_the_model.hypothesis.inner_test(  # type: ignore[attr-defined]
            spec=spec, first_backend=first_backend, program=program()
        )


def test_per_record_tumbling_windows_reuse_the_last_window() -> None:
    assigner = TumblingWindows(size=10 * MS, offset=3 * MS)
    times = [3, 5, 12, 12, 4, -8, 100, 104, 13]
    got = [assigner.assign_windows(t, now=0) for t in times]
    fresh = [[TimeWindow(t - (t - 3) % 10, t - (t - 3) % 10 + 10)] for t in times]
    assert got == fresh
    assert got[0][0] is got[1][0]  # one window object for a run of elements in it
    assert got[2] is not got[3]  # a new list each time: a caller may change it
    assert assigner == TumblingWindows(size=10 * MS, offset=3 * MS)  # the cache is not compared


@pytest.mark.parametrize(
    ("size", "slide", "offset"), [(10, 3, 0), (10, 5, 0), (7, 3, 1), (2, 5, 0)]
)
def test_per_record_sliding_windows_cached_by_the_position_in_the_slide(
    size: int, slide: int, offset: int
) -> None:
    # with a size not a multiple of the slide, elements of one slide fall into different
    # numbers of windows: the cache must not hand the first one's windows to the next
    assigner = SlidingWindows(size=size * MS, slide=slide * MS, offset=offset * MS)
    for t in [*range(-12, 30), 4, 3, 29, -1]:
        last_start = t - (t - offset) % slide
        expected = [
            TimeWindow(start, start + size)
            for start in range(last_start, t - size, -slide)
            if start > t - size
        ]
        assert assigner.assign_windows(t, now=0) == expected, t


def test_per_record_time_window_namespace_survives_copies() -> None:
    w = TimeWindow(1000, 2000)
    for other in (pickle.loads(pickle.dumps(w)), copy.deepcopy(w), replace(w, end=3000)):
        assert other.namespace == f"TimeWindow({other.start}, {other.end})"
        assert other.max_timestamp == other.end - 1
    assert replace(w, end=3000).namespace == "TimeWindow(1000, 3000)"
    # as a window pickled before the namespace was cached: only its fields
    old = object.__new__(TimeWindow)
    old.__setstate__({"start": 5, "end": 9})
    assert (old, old.namespace, old.max_timestamp) == (TimeWindow(5, 9), "TimeWindow(5, 9)", 8)
    assert hash(w) == hash(TimeWindow(1000, 2000)) and w < TimeWindow(1000, 3000)


class RegistersThenDeletes(Trigger):
    """Registers the window's end as a timer, then deletes it: the operator's cleanup timer at
    the same time must still be registered."""

    def on_element(self, element: Any, timestamp: Any, window: Any, ctx: Any) -> TriggerResult:
        ctx.register_event_time_timer(window.max_timestamp)
        ctx.delete_event_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE


class Emit(ProcessWindowFunction):
    def __init__(self) -> None:
        self.cleared: list[Any] = []

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        yield key, context.window.start, sum(e[1] for e in elements)


class EmitAndClear(Emit):
    def clear(self, context: Any) -> None:
        self.cleared.append(context.window)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
@pytest.mark.parametrize("lateness", [0, 5])
def test_per_record_cleanup_timer_registered_once_and_kept_after_a_trigger_deletes_its_own(
    backend: str, lateness: int
) -> None:
    op = window(
        TumblingWindows(size=10 * MS), element_type=PICKLED, allowed_lateness=lateness * MS
    ).process(Emit())
    custom = window(
        TumblingWindows(size=10 * MS),
        element_type=PICKLED,
        trigger=RegistersThenDeletes(),
        allowed_lateness=lateness * MS,
    ).process(Emit())
    for function in (op, custom):
        with KeyedProcessFunctionHarness(
            function, key=operator.itemgetter(0), backend=backend
        ) as h:
            for element, t in [(("a", 1), 3), (("a", 2), 4), (("b", 5), 12)]:
                assert h.process_element(element, t) == []
            timers = sorted((t.key, t.timestamp, t.namespace) for t in h.timers())
            ends = {("a", 9, "TimeWindow(0, 10)"), ("b", 19, "TimeWindow(10, 20)")}
            cleanup = {(k, t + lateness, ns) for k, t, ns in ends}
            # the trigger's own timer (deleted by the custom one) and the cleanup timer
            expected = cleanup if function is custom else ends | cleanup
            assert timers == sorted(expected)
            assert sorted(h.end_input()) == [("a", 0, 3), ("b", 10, 5)]
            assert h.timers() == []


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_per_record_function_clear_called_only_when_it_has_one(backend: str) -> None:
    for function, clears in ((Emit(), False), (EmitAndClear(), True)):
        op = window(TumblingWindows(size=10 * MS), element_type=PICKLED).process(function)
        with KeyedProcessFunctionHarness(op, key=operator.itemgetter(0), backend=backend) as h:
            h.process_element(("a", 1), 3)
            h.process_element(("a", 2), 13)
            assert sorted(h.advance_watermark(30)) == [("a", 0, 1), ("a", 10, 2)]
        expected = [TimeWindow(0, 10), TimeWindow(10, 20)] if clears else []
        assert function.cleared == expected


class EveryTenOfTheClock(WindowAssigner):
    """An event-time assigner of the user's that reads the processing time: windows of 10 ms
    of ``now`` (the operator must still read the clock for it)."""

    def assign_windows(self, timestamp: int | None, *, now: int) -> list[Any]:
        return [TimeWindow(now - now % 10, now - now % 10 + 10)]

    def default_trigger(self) -> Trigger:
        return TumblingWindows(size=10 * MS).default_trigger()

    @property
    def is_event_time(self) -> bool:
        return True


def test_per_record_a_custom_event_time_assigner_still_gets_the_clock() -> None:
    op = window(EveryTenOfTheClock(), element_type=PICKLED).process(Emit())
    with KeyedProcessFunctionHarness(
        op, key=operator.itemgetter(0), backend="heap", processing_time=1234
    ) as h:
        h.process_element(("a", 7), 5)
        assert [t.namespace for t in h.timers(TimeDomain.EVENT_TIME)] == ["TimeWindow(1230, 1240)"]
        assert h.end_input() == [("a", 1230, 7)]
