"""A ``ProcessFunction`` over a stream without a key (statecore's own API), run by
``NonKeyedFunction`` in the harness: the element's timestamp, the clocks and side outputs;
no keyed state and no timers, as in Flink."""

from __future__ import annotations

from typing import Any

import pytest

from statecore import OutputTag, ProcessFunction, ValueStateDescriptor
from statecore.errors import ConfigError, StateAccessError
from statecore.runtime import KeyedProcessFunction
from statecore.runtime.process_function import NonKeyedFunction
from statecore.testing import KeyedProcessFunctionHarness

BAD = OutputTag("bad")


class Parse(ProcessFunction):
    """Parses ``"name=amount"`` lines: good ones out with the time and watermark, bad ones to
    a side output; ``open`` learns the subtask."""

    def open(self, ctx: Any) -> None:
        self.where = (ctx.job, ctx.operator, ctx.subtask_index, ctx.parallelism)
        self.context = ctx

    def process_element(self, line: str, ctx: Any) -> Any:
        name, _, amount = line.partition("=")
        if not amount.isdigit():
            ctx.output(BAD, line)
            return
        yield name, int(amount), ctx.timestamp, ctx.current_watermark()

    def close(self) -> None:
        self.where = None


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_rich_function_non_keyed_process_function_in_the_harness(backend: str) -> None:
    function = Parse()
    with KeyedProcessFunctionHarness(
        NonKeyedFunction(function), key=lambda line: line, backend=backend
    ) as harness:
        assert function.where == ("harness", "main", 0, 1)
        assert harness.process_element("a=1", timestamp=10) == [("a", 1, 10, harness.watermark)]
        harness.advance_watermark(50)
        assert harness.process_element("b=2", timestamp=60) == [("b", 2, 60, 50)]
        assert harness.process_element("oops", timestamp=70) == []
        assert harness.side_output(BAD) == ["oops"]
        with pytest.raises(StateAccessError, match="no keyed state"):
            function.context.get_state(ValueStateDescriptor("n", int))
        assert harness.timers() == []
    assert function.where is None  # closed


def test_rich_function_non_keyed_process_function_refuses_other_functions() -> None:
    class Keyed(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            return None

    with pytest.raises(ConfigError, match="is not a ProcessFunction"):
        NonKeyedFunction(Keyed())  # type: ignore[arg-type]
