"""The TTL decorator layer: the expiry logic once, a thin wrapper per state kind.

Each wrapper holds the backend's state of the stored form (see :mod:`statecore.ttl.storage`) and
the clock. A read checks the last-access timestamp: an expired value is removed (cleanup on read,
always on) and, unless the visibility is ``RETURN_EXPIRED_IF_NOT_CLEANED_UP``, not returned; with
``ON_READ_AND_WRITE`` a read refreshes the timestamp. Writes stamp the current time. Reducing and
aggregating states are stored as a value state of the accumulated value and reduce here, so no
backend needs a TTL-aware reduce or aggregate function.

States without a TTL never pass through this module.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from statecore.descriptors import (
    AggregatingStateDescriptor,
    ReducingStateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from statecore.errors import StateAccessError
from statecore.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    State,
    ValueState,
)
from statecore.ttl.config import StateVisibility, UpdateType
from statecore.ttl.storage import TTL_TIMESTAMP, VALUE, TtlStorage
from statecore.ttl.time import TtlTimeProvider

__all__ = [
    "create_ttl_state",
    "TtlValueState",
    "TtlListState",
    "TtlMapState",
    "TtlReducingState",
    "TtlAggregatingState",
]

_MISSING: Any = object()


class _TtlDecorator:
    """Flink's ``AbstractTtlDecorator``: expiry, refresh on read, and the stored form."""

    __slots__ = (
        "_raw",
        "_storage",
        "_name",
        "_ttl_ms",
        "_clock",
        "_update_on_read",
        "_return_expired",
        "_pickled",
        "_info",
        "_access",
        "_namespace",
    )

    def __init__(
        self,
        raw: State,
        storage: TtlStorage,
        clock: TtlTimeProvider,
        cleanup: Callable[[], None] | None,
    ) -> None:
        self._raw = raw
        self._storage = storage
        self._name = storage.descriptor.name
        self._ttl_ms = storage.ttl_ms
        self._clock = clock
        self._update_on_read = storage.config.update_type is UpdateType.ON_READ_AND_WRITE
        self._return_expired = (
            storage.config.visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
        )
        self._pickled = storage.inner.pickled
        self._info = storage.inner
        self._access = cleanup
        self._namespace = ""

    def set_current_namespace(self, namespace: str) -> None:
        self._raw.set_current_namespace(namespace)
        self._namespace = namespace

    def clear(self) -> None:
        if self._access is not None:
            self._access()
        self._raw.clear()

    def _check(self, value: Any, what: str) -> None:
        if value is None:
            raise StateAccessError(f"state {self._name!r}: a {what} must not be None")
        if not self._info.accepts(value):
            raise StateAccessError(
                f"state {self._name!r}: {what} {value!r} of type {type(value).__name__} "
                f"does not match the declared type {self._info.arrow}"
            )

    def _wrap(self, value: Any, now: int) -> dict[str, Any]:
        if self._pickled and value is not None:
            value = pickle.dumps(value)
        return {VALUE: value, TTL_TIMESTAMP: now}

    def _unwrap(self, stored: dict[str, Any]) -> Any:
        value = stored[VALUE]
        return pickle.loads(value) if self._pickled and value is not None else value

    def _expired(self, stored: dict[str, Any], now: int) -> bool:
        return bool(stored[TTL_TIMESTAMP] + self._ttl_ms <= now)


class _TtlSingleValue(_TtlDecorator):
    """Value, reducing and aggregating states: one stored struct per key and namespace."""

    __slots__ = ()

    _raw: ValueState

    def _get(self) -> Any:
        """The unexpired user value (refreshed on read if configured), or ``_MISSING``."""
        if self._access is not None:
            self._access()
        stored = self._raw.value()
        if stored is None:
            return _MISSING
        now = self._clock.current_timestamp()
        if self._expired(stored, now):
            self._raw.clear()
            return self._unwrap(stored) if self._return_expired else _MISSING
        if self._update_on_read:
            self._raw.update({VALUE: stored[VALUE], TTL_TIMESTAMP: now})
        return self._unwrap(stored)

    def _put(self, value: Any) -> None:
        self._raw.update(self._wrap(value, self._clock.current_timestamp()))

    def _take_stored(self, namespace: str) -> dict[str, Any] | None:
        """Remove and return the stored value of ``namespace``, expired or not."""
        self._raw.set_current_namespace(namespace)
        stored = self._raw.value()
        if stored is not None:
            self._raw.clear()
        return cast("dict[str, Any] | None", stored)

    def _merge_stored(
        self,
        merge: Callable[[Any, Any], Any],
        a: dict[str, Any],
        b: dict[str, Any],
        now: int,
    ) -> dict[str, Any] | None:
        """Flink's ``TtlReduceFunction.reduce`` and ``TtlAggregateFunction.merge`` over two
        stored values: the sides that count (an expired one only under
        ``RETURN_EXPIRED_IF_NOT_CLEANED_UP``) merged, or the one that counts, stamped ``now``;
        ``None`` when neither counts."""
        counts_a = self._return_expired or not self._expired(a, now)
        counts_b = self._return_expired or not self._expired(b, now)
        if counts_a and counts_b:
            return self._wrap(merge(self._unwrap(a), self._unwrap(b)), now)
        if counts_a or counts_b:
            return {VALUE: (a if counts_a else b)[VALUE], TTL_TIMESTAMP: now}
        return None

    def _merge_namespaces(
        self, target: str, sources: Iterable[str], merge: Callable[[Any, Any], Any]
    ) -> None:
        """Flink's ``mergeNamespaces`` of a TTL state: the sources' stored values folded in
        order (the first as it is, timestamp included), then into the target's, each step
        through :meth:`_merge_stored`; a target whose merge leaves nothing is cleared."""
        current = self._namespace
        now = self._clock.current_timestamp()
        try:
            merged: dict[str, Any] | None = None
            for source in sources:
                stored = self._take_stored(source)
                if stored is not None:
                    merged = (
                        stored if merged is None else self._merge_stored(merge, merged, stored, now)
                    )
            if merged is None:
                return
            existing = self._take_stored(target)  # the raw state is at the target now
            if existing is not None:
                merged = self._merge_stored(merge, existing, merged, now)
            if merged is not None:
                self._raw.update(merged)
        finally:
            self._raw.set_current_namespace(current)


class TtlValueState(_TtlSingleValue, ValueState):
    __slots__ = ("_default", "_fresh_default")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        descriptor = cast(ValueStateDescriptor, self._storage.descriptor)
        self._default = descriptor.default
        self._fresh_default = descriptor.default_factory  # None: the default is immutable

    def value(self) -> Any:
        value = self._get()
        if value is not _MISSING:
            return value
        return self._default if self._fresh_default is None else self._fresh_default()

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        self._check(value, "value")
        self._put(value)


class TtlReducingState(_TtlSingleValue, ReducingState):
    __slots__ = ("_reduce",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._reduce = cast(ReducingStateDescriptor, self._storage.descriptor).reduce_function

    def get(self) -> Any:
        value = self._get()
        return None if value is _MISSING else value

    def add(self, value: Any) -> None:
        self._check(value, "value")
        current = self._get()
        self._put(value if current is _MISSING else self._reduce(current, value))

    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        self._merge_namespaces(target, sources, self._reduce)


class TtlAggregatingState(_TtlSingleValue, AggregatingState):
    __slots__ = ("_function",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._function = cast(
            AggregatingStateDescriptor, self._storage.descriptor
        ).aggregate_function

    def get(self) -> Any:
        acc = self._get()
        return None if acc is _MISSING else self._function.get_result(acc)

    def add(self, value: Any) -> None:
        if value is None:
            raise StateAccessError(f"state {self._name!r}: cannot add None")
        acc = self._get()
        if acc is _MISSING:
            acc = self._function.create_accumulator()
        self._put(self._function.add(value, acc))

    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        self._merge_namespaces(target, sources, self._function.merge)


class TtlListState(_TtlDecorator, ListState):
    """Per-element TTL: each element carries its own timestamp."""

    __slots__ = ()

    _raw: ListState

    def _alive(self, stored: list[dict[str, Any]], now: int) -> list[dict[str, Any]]:
        limit = now - self._ttl_ms
        return [e for e in stored if e[TTL_TIMESTAMP] > limit]

    def get(self) -> list[Any]:
        if self._access is not None:
            self._access()
        stored = self._raw.get()
        if not stored:
            return []
        now = self._clock.current_timestamp()
        alive = self._alive(stored, now)
        if self._update_on_read and alive:
            alive = [{VALUE: e[VALUE], TTL_TIMESTAMP: now} for e in alive]
            self._raw.update(alive)
        elif len(alive) != len(stored):
            self._raw.update(alive)  # cleanup on read; an empty list clears
        return [self._unwrap(e) for e in (stored if self._return_expired else alive)]

    def add(self, value: Any) -> None:
        if self._access is not None:
            self._access()
        self._check(value, "list element")
        self._raw.add(self._wrap(value, self._clock.current_timestamp()))

    def _wrap_all(self, values: Iterable[Any]) -> list[dict[str, Any]]:
        if values is None:
            raise StateAccessError(f"state {self._name!r}: the list of values must not be None")
        values = list(values)
        for v in values:
            self._check(v, "list element")
        now = self._clock.current_timestamp()
        return [self._wrap(v, now) for v in values]

    def add_all(self, values: Iterable[Any]) -> None:
        if self._access is not None:
            self._access()
        wrapped = self._wrap_all(values)
        if wrapped:
            self._raw.add_all(wrapped)

    def update(self, values: Iterable[Any]) -> None:
        if self._access is not None:
            self._access()
        self._raw.update(self._wrap_all(values))

    def merge_namespaces(self, target: str, sources: Iterable[str]) -> None:
        """Flink's: the backend's list merge of the stored elements, which appends them as they
        are (expired ones too, with their timestamps: a read cleans them up)."""
        self._raw.merge_namespaces(target, sources)


class TtlMapState(_TtlDecorator, MapState):
    """Per-entry TTL: each map value carries its own timestamp."""

    __slots__ = ()

    _raw: MapState

    def _get_wrapped(self, key: Any, now: int) -> Any:
        stored = self._raw.get(key)
        if stored is None:
            return _MISSING
        if self._expired(stored, now):
            self._raw.remove(key)
            return stored if self._return_expired else _MISSING
        if self._update_on_read:
            self._raw.put(key, {VALUE: stored[VALUE], TTL_TIMESTAMP: now})
        return stored

    def get(self, key: Any) -> Any:
        if self._access is not None:
            self._access()
        stored = self._get_wrapped(key, self._clock.current_timestamp())
        return None if stored is _MISSING else self._unwrap(stored)

    def contains(self, key: Any) -> bool:
        if self._access is not None:
            self._access()
        return self._get_wrapped(key, self._clock.current_timestamp()) is not _MISSING

    def put(self, key: Any, value: Any) -> None:
        if self._access is not None:
            self._access()
        if value is not None and not self._info.accepts(value):
            self._check(value, "map value")
        self._raw.put(key, self._wrap(value, self._clock.current_timestamp()))

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        for key, value in entries.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        if self._access is not None:
            self._access()
        self._raw.remove(key)

    def items(self) -> Iterator[tuple[Any, Any]]:
        if self._access is not None:
            self._access()
        now = self._clock.current_timestamp()
        out = []
        for key, stored in list(self._raw.items()):
            if self._expired(stored, now):
                self._raw.remove(key)
                if not self._return_expired:
                    continue
            elif self._update_on_read:
                self._raw.put(key, {VALUE: stored[VALUE], TTL_TIMESTAMP: now})
            out.append((key, self._unwrap(stored)))
        return iter(out)

    def is_empty(self) -> bool:
        return next(self.items(), None) is None

    def __len__(self) -> int:
        return sum(1 for _ in self.items())


_TTL_STATES: dict[StateKind, type[_TtlDecorator]] = {
    StateKind.VALUE: TtlValueState,
    StateKind.LIST: TtlListState,
    StateKind.MAP: TtlMapState,
    StateKind.REDUCING: TtlReducingState,
    StateKind.AGGREGATING: TtlAggregatingState,
}


def create_ttl_state(
    raw: State,
    storage: TtlStorage,
    clock: TtlTimeProvider,
    cleanup: Callable[[], None] | None = None,
) -> State:
    """Wrap ``raw`` (a state of ``storage.stored``) in the TTL decorator of its kind.

    ``cleanup`` runs before every access (incremental cleanup), when given.
    """
    state = _TTL_STATES[storage.kind](raw, storage, clock, cleanup)
    return cast(State, state)
