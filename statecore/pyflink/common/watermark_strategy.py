"""PyFlink's ``WatermarkStrategy`` and ``TimestampAssigner``
(``pyflink.common.watermark_strategy``), mapped onto statecore's event time: the assigner's
timestamp becomes the record's event time (``ctx.timestamp()``) and the strategy's
out-of-orderness the run's ``allowed_lateness``.

>>> from statecore.pyflink.common.time import Duration
>>> strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(2))
>>> strategy.out_of_orderness, WatermarkStrategy.for_monotonous_timestamps().out_of_orderness
(datetime.timedelta(seconds=2), datetime.timedelta(0))

Watermarks advance as statecore advances them (the largest event time seen minus the
out-of-orderness minus 1 ms, between records within a task; at the end of a micro-batch in a
stream); ``with_idleness`` is accepted and has nothing to do: a Spark task with no records does
not hold a micro-batch's watermark back. ``no_watermarks()`` gives records no event time (as a
source without timestamps in Flink); with a timestamp assigner it raises
:class:`~statecore.errors.PyFlinkUnsupportedError`, since statecore's watermark always follows
the event times it sees.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.pyflink.common.time import Time, to_timedelta

__all__ = ["TimestampAssigner", "WatermarkStrategy"]


class TimestampAssigner(ABC):
    """PyFlink's ``TimestampAssigner``: an element's event time in epoch milliseconds."""

    @abstractmethod
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int: ...


class _FunctionAssigner(TimestampAssigner):
    def __init__(self, function: Callable[[Any, int], int]) -> None:
        self.function = function

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return self.function(value, record_timestamp)


class WatermarkStrategy:
    """How records get event times and how far the watermark trails them."""

    def __init__(
        self,
        out_of_orderness: timedelta | None,
        assigner: TimestampAssigner | None = None,
        idleness: timedelta | None = None,
    ) -> None:
        self.out_of_orderness = out_of_orderness
        """``None`` for ``no_watermarks()``."""
        self.timestamp_assigner = assigner
        self.idleness = idleness

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Time | timedelta) -> WatermarkStrategy:
        return WatermarkStrategy(to_timedelta(max_out_of_orderness))

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        return WatermarkStrategy(timedelta(0))

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        return WatermarkStrategy(None)

    def with_timestamp_assigner(
        self, timestamp_assigner: TimestampAssigner | Callable[[Any, int], int]
    ) -> WatermarkStrategy:
        if self.out_of_orderness is None:
            raise PyFlinkUnsupportedError(
                "WatermarkStrategy.no_watermarks().with_timestamp_assigner(...): statecore's "
                "watermark follows the event times it sees; use "
                "WatermarkStrategy.for_bounded_out_of_orderness(...) with the assigner "
                f"({COMING_FROM_PYFLINK})"
            )
        assigner = (
            timestamp_assigner
            if isinstance(timestamp_assigner, TimestampAssigner)
            else _FunctionAssigner(timestamp_assigner)
        )
        return WatermarkStrategy(self.out_of_orderness, assigner, self.idleness)

    def with_idleness(self, idle_timeout: Time | timedelta) -> WatermarkStrategy:
        return WatermarkStrategy(
            self.out_of_orderness, self.timestamp_assigner, to_timedelta(idle_timeout)
        )

    def with_watermark_alignment(self, *args: Any, **kwargs: Any) -> WatermarkStrategy:
        raise PyFlinkUnsupportedError(
            "WatermarkStrategy.with_watermark_alignment: a Spark micro-batch reads every "
            f"source up to the same trigger; drop the call ({COMING_FROM_PYFLINK})"
        )
