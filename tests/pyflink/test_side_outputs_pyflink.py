"""PyFlink's ``OutputTag`` and ``ctx.output`` over statecore's side outputs (no Spark): a
PyFlink-style ``KeyedProcessFunction`` emits to a side output in the harness, as in Flink."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from statecore import OutputTag as StatecoreOutputTag
from statecore.pyflink.common import Types
from statecore.pyflink.datastream import (
    KeyedProcessFunction,
    OutputTag,
    RuntimeContext,
)
from statecore.pyflink.datastream.state import ValueStateDescriptor
from statecore.testing import KeyedProcessFunctionHarness

ODD = OutputTag("odd", Types.TUPLE([Types.STRING(), Types.INT()]))


class SplitOdd(KeyedProcessFunction):
    """A running count per key on the main output; odd values to ``odd``; the count again
    from an event-time timer."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        self.count.update((self.count.value() or 0) + 1)
        if value[1] % 2:
            ctx.output(ODD, (ctx.get_current_key(), value[1]))
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5)
        yield ctx.get_current_key(), self.count.value()

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> None:
        ctx.output(ODD, (ctx.get_current_key(), -timestamp))


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_side_output_pyflink_ctx_output_in_the_harness(backend: str) -> None:
    with KeyedProcessFunctionHarness(SplitOdd(), key=lambda e: e[0], backend=backend) as h:
        h.process_elements([("a", 1), ("a", 2), ("b", 3)], [10, 11, 12])
        assert h.output == [("a", 1), ("a", 2), ("b", 1)]
        assert h.side_output(ODD) == [("a", 1), ("b", 3)]
        h.advance_watermark(16)  # a's timers at 15 and 16 fire, b's at 17 waits
        assert h.side_output("odd") == [("a", 1), ("b", 3), ("a", -15), ("a", -16)]


def test_side_output_pyflink_tag_is_statecores() -> None:
    assert ODD.tag_id == ODD.name == "odd" and ODD.get_type_info() is not None
    assert isinstance(ODD, StatecoreOutputTag)
