"""State-access latency tracking, as Flink's ``state.latency-track.*``: sampled, per state and
access, percentiles recorded with each checkpoint.

With tracking on, every keyed state a function gets from its :class:`RuntimeContext` is a
:class:`Tracked` stand-in for the backend's state: a subclass instance of the state's own class
(so ``isinstance`` still holds) whose public methods are the backend state's bound methods, set
on the instance, so an access costs what it costs without tracking. Every ``sample_interval``-th
record (Flink's default: 100) the task swaps those methods for timed ones for the duration of
that record, so each access the record makes (``value``/``update``, ``get``/``add``,
``get``/``put``/``remove``/``contains``/iteration, ``merge_namespaces``, ``clear``) is timed with
``perf_counter_ns``; each state and access keeps the last ``history_size`` samples (Flink: 128).
A task reports those samples with its snapshot; the driver merges every task's samples into
p50/p95/p99 per state and access (:func:`latency_percentiles`).

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
from statecore.state import State

__all__ = [
    "LatencyTracker",
    "LatencyTracking",
    "Tracked",
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


class Tracked:
    """Marks the stand-ins of tracked states (see the module docstring)."""

    _tracked_inner: State

    def __getattr__(self, name: str) -> Any:  # anything not tracked: the backend's state
        return getattr(self._tracked_inner, name)


_STAND_INS: dict[type, type] = {}


def _stand_in_class(cls: type) -> type:
    if cls not in _STAND_INS:
        _STAND_INS[cls] = type(f"Tracked{cls.__name__}", (Tracked, cls), {})
    return _STAND_INS[cls]


class LatencyTracker:
    """The tracked states of one task and their samples."""

    def __init__(self, tracking: LatencyTracking) -> None:
        self.tracking = tracking
        self._states: dict[str, tuple[Any, State, dict[str, Callable[..., Any]]]] = {}
        self._samples: dict[tuple[str, str], deque[int]] = {}

    def track(self, name: str, state: State) -> State:
        """The stand-in of ``state`` (one per state name)."""
        known = self._states.get(name)
        if known is not None and known[1] is state:
            return known[0]  # type: ignore[no-any-return]
        stand_in = object.__new__(_stand_in_class(type(state)))
        object.__setattr__(stand_in, "_tracked_inner", state)
        public = {
            a: getattr(state, a)
            for a in dir(type(state))
            if not a.startswith("_") and callable(getattr(state, a))
        }
        stand_in.__dict__.update(public)  # every method: the backend state's own, bound
        plain = {a: m for a, m in public.items() if a in ACCESSES}
        self._states[name] = (stand_in, state, plain)
        return stand_in  # type: ignore[no-any-return]

    def _timed(self, name: str, access: str, method: Callable[..., Any]) -> Callable[..., Any]:
        samples = self._samples.setdefault((name, access), deque(maxlen=self.tracking.history_size))
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
        for name, (stand_in, _, plain) in self._states.items():
            stand_in.__dict__.update(
                {access: self._timed(name, access, method) for access, method in plain.items()}
            )

    def stop(self) -> None:
        for stand_in, _, plain in self._states.values():
            stand_in.__dict__.update(plain)

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
