"""Timers: event-time and processing-time callbacks per key and namespace.

A :class:`TimerService` belongs to a keyed state backend and is bound to its current key (the
backend's :class:`~statecore.backends.context.KeyContext`), as Flink's ``InternalTimerService``:
user code registers and deletes timers for the current key; the runtime advances the watermark
(or processing time) and gets the due timers back, in order of timestamp, each with its key made
current. A key, namespace and timestamp hold at most one timer
per time domain. Timers are kept per key group, so they are snapshotted, restored and
redistributed on rescale exactly like keyed state (columns ``key``, ``namespace``, ``timestamp``
(epoch ms), ``time_domain``).

>>> from statecore.backends import HeapKeyedStateBackend
>>> from statecore.keygroups import KeyGroupRange
>>> from statecore.types import TypeInfo
>>> backend = HeapKeyedStateBackend(key_type=TypeInfo.of(str),
...                                 key_group_range=KeyGroupRange(0, 127), max_parallelism=128)
>>> timers = backend.timer_service
>>> backend.set_current_key("a"); timers.register_event_time_timer(20)
>>> backend.set_current_key("b"); timers.register_event_time_timer(10)
>>> [(t.key, t.timestamp) for t in timers.advance_watermark(15)]
[('b', 10)]
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterator
from typing import Any, NamedTuple, NoReturn, Protocol

import pyarrow as pa

from statecore.backends.context import KeyContext
from statecore.errors import (
    COMING_FROM_PYFLINK,
    CorruptSnapshotError,
    PyFlinkSpellingError,
    StateAccessError,
)
from statecore.keygroups import Key, KeyGroupRange
from statecore.state import VOID_NAMESPACE
from statecore.ttl.time import TtlTimeProvider
from statecore.types import TypeInfo

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "TimeDomain",
    "Timer",
    "TimerHost",
    "TimerService",
    "timers_schema",
]

MIN_WATERMARK = -(1 << 63)
"""The watermark before any event time is known (Flink's ``Long.MIN_VALUE``)."""

MAX_WATERMARK = (1 << 63) - 1
"""The watermark at the end of a bounded input (Flink's ``Long.MAX_VALUE``): every event-time
timer fires, and no record can follow."""


class TimeDomain(enum.Enum):
    """Which clock a timer follows (``ctx.time_domain`` in ``on_timer``)."""

    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise PyFlinkSpellingError(
            "ctx.time_domain() is PyFlink's spelling; statecore spells it ctx.time_domain "
            f"(an attribute, {self}) ({COMING_FROM_PYFLINK})"
        )


class Timer(NamedTuple):
    """A due timer, as handed to ``on_timer``."""

    timestamp: int
    key: Any
    namespace: str
    time_domain: TimeDomain


def timers_schema(key_type: Any) -> pa.Schema:
    """The snapshot rows of timers (without the ``key_group`` partition)."""
    return pa.schema(
        [
            pa.field("key", key_type.arrow, nullable=False),
            pa.field("namespace", pa.string(), nullable=False),
            pa.field("timestamp", pa.int64(), nullable=False),
            pa.field("time_domain", pa.string(), nullable=False),
        ]
    )


class _TimerQueue:
    """One time domain: a heap by ``(timestamp, key_group, key, namespace)`` plus, per key
    group, the set of live timers (deletion is lazy: the heap skips timers no longer live)."""

    __slots__ = ("heap", "by_key_group")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Any, str]] = []
        self.by_key_group: dict[int, set[tuple[int, Any, str]]] = {}

    def add(self, timestamp: int, key_group: int, key: Any, namespace: str) -> bool:
        live = self.by_key_group.setdefault(key_group, set())
        timer = (timestamp, key, namespace)
        if timer in live:
            return False
        live.add(timer)
        heapq.heappush(self.heap, (timestamp, key_group, key, namespace))
        return True

    def remove(self, timestamp: int, key_group: int, key: Any, namespace: str) -> bool:
        live = self.by_key_group.get(key_group)
        timer = (timestamp, key, namespace)
        if live is None or timer not in live:
            return False
        live.discard(timer)
        return True

    def pop_due(self, until: int) -> tuple[int, int, Any, str] | None:
        heap = self.heap
        while heap and heap[0][0] <= until:
            timestamp, key_group, key, namespace = heapq.heappop(heap)
            live = self.by_key_group.get(key_group)
            if live is not None and (timestamp, key, namespace) in live:
                live.discard((timestamp, key, namespace))
                return timestamp, key_group, key, namespace
        return None

    def first(self) -> int | None:
        """The timestamp of the earliest live timer (dropping dead heap entries on the way)."""
        heap = self.heap
        while heap:
            timestamp, key_group, key, namespace = heap[0]
            live = self.by_key_group.get(key_group)
            if live is not None and (timestamp, key, namespace) in live:
                return timestamp
            heapq.heappop(heap)
        return None

    def __len__(self) -> int:
        return sum(len(s) for s in self.by_key_group.values())


class TimerHost(Protocol):
    """What a timer service needs of its backend (a
    :class:`~statecore.backends.base.KeyedStateBackend`): the current key, the clock, the key
    type and key groups, and making a due timer's key current."""

    key_context: KeyContext
    ttl_time_provider: TtlTimeProvider
    key_type: TypeInfo
    key_group_range: KeyGroupRange

    def set_current_key(self, key: Key, key_group: int | None = None) -> None: ...


class TimerService:
    """Timers of one backend's keys, bound to its current key (see the module docstring)."""

    def __init__(self, backend: TimerHost) -> None:
        self._backend = backend
        self._current = backend.key_context
        self._queues = {
            TimeDomain.EVENT_TIME: _TimerQueue(),
            TimeDomain.PROCESSING_TIME: _TimerQueue(),
        }
        self._dirty: set[int] = set()
        self.watermark = MIN_WATERMARK
        """The event-time watermark (epoch ms), moved only by the runtime
        (:meth:`advance_watermark`, and the record loop between records); a function reads it
        with :meth:`current_watermark`."""

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise PyFlinkSpellingError(
            "ctx.timer_service() is PyFlink's spelling; statecore spells it ctx.timer_service "
            "(a property): ctx.timer_service.register_event_time_timer(ts) "
            f"({COMING_FROM_PYFLINK})"
        )

    # -- what user code calls (for the current key) ----------------------------------------
    def current_watermark(self) -> int:
        """The event time up to which timers have fired (``MIN_WATERMARK`` before any)."""
        return self.watermark

    def reset_watermark(self) -> None:
        """Back to ``MIN_WATERMARK``, where a newly restored timer service starts (a backend
        kept for the next run starts the same way)."""
        self.watermark = MIN_WATERMARK

    def current_processing_time(self) -> int:
        """Processing time in epoch milliseconds (the backend's clock)."""
        return self._backend.ttl_time_provider.current_timestamp()

    def register_event_time_timer(self, timestamp: int, namespace: str = VOID_NAMESPACE) -> None:
        """Call ``on_timer`` for the current key once the watermark reaches ``timestamp``."""
        self._register(TimeDomain.EVENT_TIME, timestamp, namespace)

    def register_processing_time_timer(
        self, timestamp: int, namespace: str = VOID_NAMESPACE
    ) -> None:
        """Call ``on_timer`` for the current key once processing time reaches ``timestamp``."""
        self._register(TimeDomain.PROCESSING_TIME, timestamp, namespace)

    def delete_event_time_timer(self, timestamp: int, namespace: str = VOID_NAMESPACE) -> None:
        self._delete(TimeDomain.EVENT_TIME, timestamp, namespace)

    def delete_processing_time_timer(self, timestamp: int, namespace: str = VOID_NAMESPACE) -> None:
        self._delete(TimeDomain.PROCESSING_TIME, timestamp, namespace)

    def _register(self, domain: TimeDomain, timestamp: int, namespace: str) -> None:
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise StateAccessError(
                f"a timer timestamp must be int epoch milliseconds, got {timestamp!r}"
            )
        if not isinstance(namespace, str):
            raise StateAccessError(f"a timer namespace must be a str, got {namespace!r}")
        current = self._current
        key_group = current.key_group
        if key_group is None:
            raise StateAccessError("no current key: timers are only registered per record")
        if self._queues[domain].add(timestamp, key_group, current.key, namespace):
            self._dirty.add(key_group)

    def _delete(self, domain: TimeDomain, timestamp: int, namespace: str) -> None:
        current = self._current
        key_group = current.key_group
        if key_group is None:
            raise StateAccessError("no current key: timers are only deleted per record")
        if self._queues[domain].remove(timestamp, key_group, current.key, namespace):
            self._dirty.add(key_group)

    # -- what the runtime calls ------------------------------------------------------------
    def advance_watermark(self, watermark: int) -> Iterator[Timer]:
        """Move the watermark forward and yield every due event-time timer, its key current.

        Timers registered while iterating that are already due fire in the same pass.
        """
        self.watermark = max(self.watermark, watermark)
        return self._fire(TimeDomain.EVENT_TIME, self.watermark)

    def event_time_heap(self) -> list[tuple[int, int, Any, str]]:
        """The event-time queue's heap, for the record loop's cheap check: its head is the
        earliest event-time timer (or a deleted one, dropped when timers fire)."""
        return self._queues[TimeDomain.EVENT_TIME].heap

    def advance_processing_time(self, now: int | None = None) -> Iterator[Timer]:
        """Yield every processing-time timer due at ``now`` (default: the clock), key current."""
        return self._fire(
            TimeDomain.PROCESSING_TIME, self.current_processing_time() if now is None else now
        )

    def _fire(self, domain: TimeDomain, until: int) -> Iterator[Timer]:
        queue = self._queues[domain]
        while (due := queue.pop_due(until)) is not None:
            timestamp, key_group, key, namespace = due
            self._dirty.add(key_group)
            self._backend.set_current_key(key, key_group)
            yield Timer(timestamp, key, namespace, domain)

    def next_timestamp(self, domain: TimeDomain) -> int | None:
        """When the earliest timer of ``domain`` is due (``None``: no timer)."""
        return self._queues[domain].first()

    def timers(self, domain: TimeDomain) -> list[Timer]:
        """Every registered timer of ``domain``, by timestamp, key group, key and namespace."""
        out = [
            (ts, kg, key, ns)
            for kg, live in self._queues[domain].by_key_group.items()
            for ts, key, ns in live
        ]
        return [Timer(ts, key, ns, domain) for ts, _, key, ns in sorted(out)]

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    # -- snapshots -------------------------------------------------------------------------
    def changed_key_groups(self) -> set[int]:
        """Key groups whose timers changed since the last :meth:`mark_snapshotted`."""
        return set(self._dirty)

    def mark_snapshotted(self) -> None:
        self._dirty.clear()

    def snapshot_key_group(self, key_group: int) -> pa.Table:
        keys: list[Any] = []
        namespaces: list[str] = []
        stamps: list[int] = []
        domains: list[str] = []
        for domain, queue in self._queues.items():
            for ts, key, ns in sorted(queue.by_key_group.get(key_group, ())):
                keys.append(key)
                namespaces.append(ns)
                stamps.append(ts)
                domains.append(domain.value)
        return pa.Table.from_pydict(
            {"key": keys, "namespace": namespaces, "timestamp": stamps, "time_domain": domains},
            schema=timers_schema(self._backend.key_type),
        )

    def restore_key_group(self, key_group: int, rows: pa.Table) -> None:
        if key_group not in self._backend.key_group_range:
            raise CorruptSnapshotError(
                f"timers of key group {key_group} restored into a backend of key groups "
                f"{self._backend.key_group_range}"
            )
        try:
            for key, ns, ts, domain in zip(
                *(
                    rows.column(c).to_pylist()
                    for c in ("key", "namespace", "timestamp", "time_domain")
                )
            ):
                self._queues[TimeDomain(domain)].add(ts, key_group, key, ns)
        except (KeyError, ValueError) as exc:
            raise CorruptSnapshotError(f"timers of key group {key_group}: {exc}") from exc
