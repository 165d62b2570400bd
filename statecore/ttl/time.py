"""The clock TTL reads: processing time in milliseconds, injectable for tests."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["TtlTimeProvider", "SystemTimeProvider", "ManualTimeProvider"]


class TtlTimeProvider(Protocol):
    def current_timestamp(self) -> int:
        """Processing time in epoch milliseconds."""
        ...


class SystemTimeProvider:
    def current_timestamp(self) -> int:
        return time.time_ns() // 1_000_000


class ManualTimeProvider:
    """A clock that moves only when told to.

    >>> clock = ManualTimeProvider(1000)
    >>> clock.advance(500); clock.current_timestamp()
    1500
    """

    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def current_timestamp(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms
