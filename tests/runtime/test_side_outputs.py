"""Side outputs in the runtime, through the test harness (no Spark): ``ctx.output(tag, value)``
from ``process_element`` and ``on_timer``, gathered per tag beside the main output, as Flink's
``KeyedProcessOperatorTest`` reads ``getSideOutput(tag)``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

import statecore
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.runtime import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from statecore.runtime.functions import OutputTag
from statecore.runtime.side_outputs import SideOutputs
from statecore.testing import KeyedProcessFunctionHarness

BACKENDS = ["heap", "rocksdb"]
BIG = OutputTag("big")
IDLE = OutputTag("idle")


class Reading(NamedTuple):
    sensor: str
    value: int


class Splitter(KeyedProcessFunction):
    """A running sum per sensor on the main output; readings above 50 also to ``big``; a
    sensor idle for 10 ms of event time reports its sum to ``idle`` from its timer."""

    def open(self, ctx: RuntimeContext) -> None:
        self.sum = ctx.get_state(ValueStateDescriptor("sum", int, default=0))

    def process_element(self, value: Reading, ctx: Context) -> Iterator[tuple[str, int]]:
        self.sum.update(self.sum.value() + value.value)
        if value.value > 50:
            ctx.output(BIG, (value.sensor, value.value))
        assert ctx.timestamp is not None
        ctx.timer_service.register_event_time_timer(ctx.timestamp + 10)
        yield value.sensor, self.sum.value()

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> None:
        ctx.output(IDLE, (ctx.current_key, timestamp, self.sum.value()))


def _harness(backend: str, function: KeyedProcessFunction | None = None) -> Any:
    return KeyedProcessFunctionHarness(function or Splitter(), key="sensor", backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_side_output_harness_gathers_values_per_tag_beside_the_main_output(backend: str) -> None:
    with _harness(backend) as h:
        out = h.process_elements(
            [Reading("a", 10), Reading("a", 70), Reading("b", 90), Reading("a", 5)],
            [1, 2, 3, 4],
        )
        assert out == [("a", 10), ("a", 80), ("b", 90), ("a", 85)]
        assert h.side_output(BIG) == [("a", 70), ("b", 90)]
        assert h.side_output("big") == h.side_output(BIG)  # a tag or its name
        assert h.side_output(IDLE) == []  # no timer fired yet
        assert h.output == out  # the side outputs never reach the main output


@pytest.mark.parametrize("backend", BACKENDS)
def test_side_output_from_on_timer(backend: str) -> None:
    with _harness(backend) as h:
        h.process_elements([Reading("a", 1), Reading("b", 2), Reading("a", 3)], [0, 5, 6])
        assert h.advance_watermark(20) == []  # on_timer yields nothing on the main output
        # the timers at 10 (a's first), 15 (b) and 16 (a's second), in timestamp order
        assert h.side_output(IDLE) == [("a", 10, 4), ("b", 15, 2), ("a", 16, 4)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_side_output_survives_snapshot_and_restore_only_as_state(backend: str) -> None:
    """Side outputs are output, not state: a harness restored from a snapshot starts with none,
    and the function's state it restored shows in what it emits next."""
    with _harness(backend) as h:
        h.process_elements([Reading("a", 60)], [1])
        snapshot = h.snapshot()
    with KeyedProcessFunctionHarness(
        Splitter(), key="sensor", backend=backend, restore=snapshot
    ) as restored:
        assert restored.side_output(BIG) == []
        restored.process_elements([Reading("a", 99)], [2])
        assert restored.output == [("a", 159)]
        assert restored.side_output(BIG) == [("a", 99)]


def test_side_output_tag_is_a_frozen_named_value() -> None:
    assert OutputTag("x") == OutputTag("x") and hash(OutputTag("x")) == hash(OutputTag("x"))
    assert statecore.OutputTag is OutputTag and statecore.runtime.OutputTag is OutputTag
    with pytest.raises(AttributeError):
        OutputTag("x").name = "y"  # type: ignore[misc]
    for bad in ("", "a/b", "../x", " x"):
        with pytest.raises(ConfigError, match="side output name"):
            OutputTag(bad)


def test_side_output_to_something_else_than_a_tag_is_a_clear_error() -> None:
    class Wrong(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context) -> None:
            ctx.output("big", value)  # type: ignore[arg-type]

    with _harness("heap", Wrong()) as h:
        with pytest.raises(ConfigError, match=r"ctx.output\('big', ...\): the first argument"):
            h.process_element(Reading("a", 1), 1)


def test_side_output_to_a_tag_the_run_has_no_place_for_names_it() -> None:
    outputs = SideOutputs(accepted={"big"}, where="job 'j', operator 'main'")
    outputs.emit(BIG, 1)
    with pytest.raises(ConfigError, match=r"job 'j', operator 'main': .*side output 'idle'"):
        outputs.emit(IDLE, 2)
    assert outputs.drain() == {"big": [1]}
