"""PyFlink's ``Time`` and ``Duration`` (``pyflink.common.time``): a span in milliseconds, as
``StateTtlConfig.new_builder`` takes it.

>>> Time.seconds(10).to_milliseconds(), Duration.of_minutes(1).to_milliseconds()
(10000, 60000)
"""

from __future__ import annotations

from datetime import timedelta

__all__ = ["Time", "Duration"]


class Time:
    """A span of time in milliseconds (PyFlink's ``Time``)."""

    __slots__ = ("_ms",)

    def __init__(self, milliseconds: int) -> None:
        self._ms = int(milliseconds)

    @staticmethod
    def milliseconds(milliseconds: int) -> Time:
        return Time(milliseconds)

    @staticmethod
    def seconds(seconds: int) -> Time:
        return Time(seconds * 1000)

    @staticmethod
    def minutes(minutes: int) -> Time:
        return Time(minutes * 60_000)

    @staticmethod
    def hours(hours: int) -> Time:
        return Time(hours * 3_600_000)

    @staticmethod
    def days(days: int) -> Time:
        return Time(days * 86_400_000)

    def to_milliseconds(self) -> int:
        return self._ms

    def to_timedelta(self) -> timedelta:
        """statecore's spelling of the span (a ``timedelta``)."""
        return timedelta(milliseconds=self._ms)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._ms == self._ms

    def __hash__(self) -> int:
        return hash((type(self), self._ms))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._ms} ms)"


class Duration(Time):
    """PyFlink's ``Duration`` (what newer PyFlink releases take in place of ``Time``)."""

    __slots__ = ()

    @staticmethod
    def of_millis(millis: int) -> Duration:
        return Duration(millis)

    @staticmethod
    def of_seconds(seconds: int) -> Duration:
        return Duration(seconds * 1000)

    @staticmethod
    def of_minutes(minutes: int) -> Duration:
        return Duration(minutes * 60_000)

    @staticmethod
    def of_hours(hours: int) -> Duration:
        return Duration(hours * 3_600_000)

    @staticmethod
    def of_days(days: int) -> Duration:
        return Duration(days * 86_400_000)


def to_timedelta(span: Time | timedelta) -> timedelta:
    """A PyFlink ``Time``/``Duration`` (or a ``timedelta``) as a ``timedelta``."""
    return span if isinstance(span, timedelta) else span.to_timedelta()
