"""State-access latency tracking, as Flink's ``state.latency-track.*``: sampled, per state and
access, percentiles recorded with each checkpoint.

With tracking on, a task samples every ``sample_interval``-th record (Flink's default: 100):
for that record each keyed state the function got from its :class:`RuntimeContext` is switched
to a timed subclass of its own class, whose access methods (``value``/``update``,
``get``/``add``, ``get``/``put``/``remove``/``contains``/iteration, ``merge_namespaces``,
``clear``) time the original with ``perf_counter_ns``; then it is switched back. Each state and
access keeps the last ``history_size`` samples (Flink: 128); only the outermost access of a
nested call (``update(None)`` clearing) counts. The function holds the backend's own state
object, so an unsampled record pays nothing but one comparison: the state classes are slotted,
so switching the class keeps CPython's specialized attribute loads (on an object with a
``__dict__`` it would turn them into dictionary look-ups for good), and a sampled record costs
each access site one cache miss. A task reports the samples with its snapshot; the driver
merges every task's samples into p50/p95/p99 per state and access (:func:`latency_percentiles`).

The vectorized API reads state once per key and batch through :class:`KeyedBatch`, whose calls
are not sampled.
"""

from __future__ import annotations

import inspect
import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from statecore.errors import ConfigError
from statecore.state import State

__all__ = [
    "LatencyTracker",
    "LatencyTracking",
    "latency_percentiles",
]

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


class LatencyTracker:
    """The tracked states of one task and their samples."""

    def __init__(self, tracking: LatencyTracking) -> None:
        self.tracking = tracking
        self.until_next = 0
        """Records before the next sampled one (0: the next record), across batches."""
        self._states: dict[str, State] = {}
        self._switches: list[tuple[Any, type, type]] = []  # (state, its class, timed class)
        self._samples: dict[tuple[str, str], deque[int]] = {}

    def track(self, name: str, state: State) -> State:
        """Register ``state`` (the function keeps using it as it is)."""
        if self._states.get(name) is state:
            return state
        cls = type(state)
        self._states[name] = state
        self._switches.append((state, cls, self._timed_class(name, cls)))
        return state

    def _timed_class(self, name: str, cls: type) -> type:
        """A subclass of ``cls`` with the same layout and name whose access methods time the
        originals into the samples of state ``name`` (a class per tracked state: a timed
        access then needs no look-up)."""
        namespace: dict[str, Any] = {
            "__slots__": (),
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        }
        for access in ACCESSES:
            method = getattr(cls, access, None)
            if callable(method):
                namespace[access] = self._timer(name, access, cls, method)
        return type(cls.__name__, (cls,), namespace)

    def _timer(
        self, name: str, access: str, plain: type, method: Callable[..., Any]
    ) -> Callable[..., Any]:
        samples = self._samples.get((name, access))
        if samples is None:
            samples = self._samples[(name, access)] = deque(maxlen=self.tracking.history_size)
        append = samples.append

        def timed(state: Any, *args: Any, **kwargs: Any) -> Any:
            # The access runs in the state's own class: its attribute loads stay specialized,
            # and an access it makes (``update(None)`` clearing) is part of this one.
            timed_class = state.__class__
            state.__class__ = plain
            start = perf_counter_ns()
            try:
                return method(state, *args, **kwargs)
            finally:
                append(perf_counter_ns() - start)
                state.__class__ = timed_class

        def timed0(state: Any) -> Any:
            timed_class = state.__class__
            state.__class__ = plain
            start = perf_counter_ns()
            try:
                return method(state)
            finally:
                append(perf_counter_ns() - start)
                state.__class__ = timed_class

        def timed1(state: Any, a: Any) -> Any:
            timed_class = state.__class__
            state.__class__ = plain
            start = perf_counter_ns()
            try:
                return method(state, a)
            finally:
                append(perf_counter_ns() - start)
                state.__class__ = timed_class

        # A wrapper of the method's own arity: no argument tuple and dictionary per call, and
        # its call sites stay specialized (heap tracking overhead +4.5 % -> +3.2-3.6 %).
        arity = _fixed_arity(method)
        if arity == 1:
            return timed0
        return timed1 if arity == 2 else timed

    def sample(
        self,
        process: Callable[[Any, Any], Iterable[Any] | None],
        record: Any,
        ctx: Any,
        extend: Callable[[Iterable[Any]], None],
    ) -> None:
        """Process one record (``process(record, ctx)``, its outputs to ``extend``; a
        generator's accesses happen as it is consumed) with every tracked state timed."""
        for state, _, timed in self._switches:
            state.__class__ = timed
        try:
            result = process(record, ctx)
            if result is not None:
                extend(result)
        finally:
            for state, plain, _ in self._switches:
                state.__class__ = plain

    def report(self) -> dict[str, dict[str, list[int]]]:
        """The samples (ns) per state and access, JSON-able."""
        out: dict[str, dict[str, list[int]]] = {}
        for (name, access), samples in sorted(self._samples.items()):
            if samples:
                out.setdefault(name, {})[access] = list(samples)
        return out


def _fixed_arity(method: Callable[..., Any]) -> int | None:
    """The number of parameters (``self`` included) of a plain function without defaults,
    ``*args``, ``**kwargs`` or keyword-only parameters; else ``None``."""
    code = getattr(method, "__code__", None)
    if code is None or getattr(method, "__defaults__", None) or code.co_kwonlyargcount:
        return None
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return None
    return int(code.co_argcount)


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
