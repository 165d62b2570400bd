"""The workload written against statecore's per-record API (used in-process and on Spark)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext

__all__ = ["RunningSum", "TOTAL"]

TOTAL = ValueStateDescriptor("total", int, default=0)


class RunningSum(KeyedProcessFunction):
    """Per event: read the key's total, add ``value``, write it back, emit the row."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(TOTAL)

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[str, int, int]]:
        total = self.total.value() + value.value
        self.total.update(total)
        yield ctx.current_key, value.value, total
