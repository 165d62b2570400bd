"""State-access latency tracking, as Flink's ``state.latency-track.*``: sampled, per state and
access, percentiles recorded with each checkpoint.

With tracking on, every keyed state a function gets from its :class:`RuntimeContext` is a
stand-in: an instance of the state's interface (``ValueState``, ``MapState``, ...) whose public
methods are **slots** holding the backend state's bound methods. Every ``sample_interval``-th
record (Flink's default: 100) the task stores timed wrappers in the access slots
(``value``/``update``, ``get``/``add``, ``get``/``put``/``remove``/``contains``/iteration,
``merge_namespaces``, ``clear``) for the duration of that record, then the plain methods again,
so each access the record makes is timed with ``perf_counter_ns``; each state and access keeps
the last ``history_size`` samples (Flink: 128). A slot is what keeps an unsampled access cheap:
swapping a method in the instance dictionary, or switching the object's class, would undo
CPython's specialized attribute loads on every record (measured: 15–25 % of a heap record),
where a slot load stays specialized (about 15 ns per access). A task reports the samples with
its snapshot; the driver merges every task's samples into p50/p95/p99 per state and access
(:func:`latency_percentiles`).

The vectorized API reads state once per key and batch through :class:`KeyedBatch`, whose calls
are not sampled.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from time import perf_counter_ns
from typing import Any, TypeVar

from statecore.errors import ConfigError
from statecore.state import (
    AggregatingState,
    ListState,
    MapState,
    MergingState,
    ReducingState,
    State,
    ValueState,
)

__all__ = [
    "LatencyTracker",
    "LatencyTracking",
    "latency_percentiles",
    "run_sampled",
]

T = TypeVar("T")

ACCESSES = (
    "value",
    "update",
    "get",
    "add",
    "add_all",
    "put",
    "put_all",
    "remove",
    "contains",
    "items",
    "keys",
    "values",
    "is_empty",
    "merge_namespaces",
    "clear",
)
"""The state methods that are timed (those a state's class has); others are not."""


@dataclass(frozen=True)
class LatencyTracking:
    """Flink's ``state.latency-track.sample-interval`` and ``.history-size``."""

    sample_interval: int = 100
    history_size: int = 128

    def __post_init__(self) -> None:
        if self.sample_interval < 1 or self.history_size < 1:
            raise ConfigError(
                f"latency tracking needs a positive sample interval and history size, not "
                f"{self.sample_interval} and {self.history_size}"
            )


_INTERFACES: tuple[type, ...] = (
    AggregatingState,
    ReducingState,
    ListState,
    MapState,
    ValueState,
    MergingState,
    State,
)
_STAND_INS: dict[type, type] = {}


def _forward(attribute: str) -> property:
    """A property reading ``attribute`` of the stand-in's state."""
    return property(lambda self: getattr(self._state, attribute))


def _stand_in_class(state: State) -> type:
    """The stand-in class of states of ``state``'s class: its interface, every public method a
    slot, other public attributes (of the class or the instance) read from the state
    (``_state``)."""
    cls = type(state)
    if cls not in _STAND_INS:
        interface = next(i for i in _INTERFACES if issubclass(cls, i))
        public = [a for a in dir(state) if not a.startswith("_")]
        methods = tuple(a for a in public if callable(getattr(cls, a, None)))
        namespace: dict[str, Any] = {"__slots__": ("_state", *methods)}
        for attribute in public:
            if attribute not in methods:
                namespace[attribute] = _forward(attribute)
        _STAND_INS[cls] = type(f"Tracked{cls.__name__}", (interface,), namespace)
    return _STAND_INS[cls]


class LatencyTracker:
    """The tracked states of one task and their samples."""

    def __init__(self, tracking: LatencyTracking) -> None:
        self.tracking = tracking
        self._states: dict[str, tuple[Any, State]] = {}
        self._plain: list[tuple[Any, dict[str, Callable[..., Any]]]] = []
        self._timed: list[tuple[Any, dict[str, Callable[..., Any]]]] = []
        self._samples: dict[tuple[str, str], deque[int]] = {}

    def track(self, name: str, state: State) -> State:
        """The stand-in of ``state`` (one per state name)."""
        known = self._states.get(name)
        if known is not None and known[1] is state:
            return known[0]  # type: ignore[no-any-return]
        stand_in: Any = object.__new__(_stand_in_class(state))
        stand_in._state = state
        for method in type(stand_in).__slots__[1:]:  # after "_state"
            setattr(stand_in, method, getattr(state, method))
        slots = type(stand_in).__slots__
        plain = {a: getattr(state, a) for a in ACCESSES if a in slots}
        timed = {a: self._timer(name, a, m) for a, m in plain.items()}
        self._states[name] = (stand_in, state)
        self._plain.append((stand_in, plain))
        self._timed.append((stand_in, timed))
        return stand_in  # type: ignore[no-any-return]

    def _timer(self, name: str, access: str, method: Callable[..., Any]) -> Callable[..., Any]:
        samples = self._samples.get((name, access))
        if samples is None:
            samples = self._samples[(name, access)] = deque(maxlen=self.tracking.history_size)
        append = samples.append

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = perf_counter_ns()
            try:
                return method(*args, **kwargs)
            finally:
                append(perf_counter_ns() - start)

        return timed

    def start(self) -> None:
        """Time every access from now on (until :meth:`stop`)."""
        for stand_in, methods in self._timed:
            for access, method in methods.items():
                setattr(stand_in, access, method)

    def stop(self) -> None:
        for stand_in, methods in self._plain:
            for access, method in methods.items():
                setattr(stand_in, access, method)

    def report(self) -> dict[str, dict[str, list[int]]]:
        """The samples (ns) per state and access, JSON-able."""
        out: dict[str, dict[str, list[int]]] = {}
        for (name, access), samples in sorted(self._samples.items()):
            if samples:
                out.setdefault(name, {})[access] = list(samples)
        return out


def run_sampled(
    records: Iterable[T],
    tracker: LatencyTracker | None,
    loop: Callable[[Iterable[T], list[Any]], int],
    out: list[Any],
) -> int:
    """``loop(records, out)``, with the tracker timing the accesses of every
    ``sample_interval``-th record: the loop runs on one sampled record, then on the next
    ``sample_interval - 1`` unsampled ones, and so on, so a record pays nothing for tracking.
    The records processed (the loops' counts, summed)."""
    if tracker is None:
        return loop(records, out)
    it = iter(records)
    rest = tracker.tracking.sample_interval - 1
    n = 0
    while True:
        head = list(islice(it, 1))
        if not head:
            return n
        tracker.start()
        try:
            n += loop(head, out)
        finally:
            tracker.stop()
        n += loop(islice(it, rest), out)


def latency_percentiles(
    reports: Iterable[Mapping[str, Mapping[str, list[int]]]],
) -> dict[str, dict[str, dict[str, float | int]]]:
    """Every task's samples merged: per state and access, ``samples`` and p50/p95/p99 in µs."""
    merged: dict[str, dict[str, list[int]]] = {}
    for report in reports:
        for name, accesses in report.items():
            for access, samples in accesses.items():
                merged.setdefault(name, {}).setdefault(access, []).extend(samples)
    out: dict[str, dict[str, dict[str, float | int]]] = {}
    for name, accesses in sorted(merged.items()):
        for access, samples in sorted(accesses.items()):
            ordered = sorted(samples)
            out.setdefault(name, {})[access] = {
                "samples": len(ordered),
                "p50_us": round(statistics.median(ordered) / 1000, 3),
                "p95_us": round(_rank(ordered, 0.95) / 1000, 3),
                "p99_us": round(_rank(ordered, 0.99) / 1000, 3),
            }
    return out


def _rank(ordered: list[int], q: float) -> int:
    """The nearest-rank percentile ``q`` of sorted samples."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
