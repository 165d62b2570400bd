"""The workload written against statecore's per-record API (used in-process and on Spark)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.ttl import StateTtlConfig

__all__ = ["EXPIRING_TOTAL", "ExpiringSum", "RunningSum", "TOTAL", "TTL"]

TOTAL = ValueStateDescriptor("total", int, default=0)
TTL = timedelta(hours=1)
EXPIRING_TOTAL = ValueStateDescriptor("total", int, default=0, ttl=StateTtlConfig(ttl=TTL))


class RunningSum(KeyedProcessFunction):
    """Per event: read the key's total, add ``value``, write it back, emit the row."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(TOTAL)

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[str, int, int]]:
        total = self.total.value() + value.value
        self.total.update(total)
        yield ctx.current_key, value.value, total


class ExpiringSum(RunningSum):
    """The running sum with a time to live of one hour on the total (TTL cleanup)."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(EXPIRING_TOTAL)
