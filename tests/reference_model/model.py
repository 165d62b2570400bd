"""A plain-Python model of Flink's keyed-state semantics, small enough to be obviously right.

The differential tests run one program on statecore and on this model and compare every read.

- **Keyed state**: per state a dict ``(key, namespace) -> stored``, one dict per subtask. The
  stored form carries the last-access time beside each value, list element and map entry; without
  TTL it is never looked at. The rules per primitive are Flink's: a value state's default is a
  fresh copy on every read, ``update(None)`` clears; a list's ``get`` of nothing is ``[]`` and
  ``update([])`` clears; a map may hold ``None`` values; reducing and aggregating states fold
  with their functions; a key whose list or map became empty has no value any more.
- **TTL** (Flink's ``AbstractTtlDecorator`` and ``TtlValueState``/``TtlListState``/
  ``TtlMapState``/``TtlReduceFunction``/``TtlAggregateFunction``): an entry expires at last
  access + ttl; a read removes expired entries (cleanup on read) and returns them only under
  ``RETURN_EXPIRED_IF_NOT_CLEANED_UP``; ``ON_READ_AND_WRITE`` refreshes the unexpired ones read;
  reducing and aggregating ``add`` fold into the value a read would return; merging namespaces
  follows Flink's TTL merge functions (see :meth:`KeyedModel.merge_namespaces`).
- **Checkpoint** is a deep copy (less what expired, under cleanup in full snapshot);
  **restore** at parallelism ``p`` and max parallelism ``m`` hands every ``(key, namespace)``
  entry to the subtask owning the key's key group (statecore's own
  :func:`~statecore.keygroups.assign_to_key_group`, Flink's range formula).
- **Timers** (:class:`TimerModel`): a set of ``(timestamp, key)``; advancing the watermark fires
  every timer at or below it in timestamp order, including timers registered while firing.
- **Operator state** (:func:`redistribute`): Flink's ``RoundRobinOperatorStateRepartitioner``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from statecore.keygroups import assign_to_key_group, compute_operator_index_for_key_group

__all__ = ["ABSENT", "Kind", "ModelTtl", "KeyedModel", "TimerModel", "redistribute"]

ABSENT: Any = object()


@dataclass(frozen=True)
class ModelTtl:
    ttl_ms: int
    update_on_read: bool
    return_expired: bool


@dataclass(frozen=True)
class Kind:
    """What the model needs of a state: its kind, the value state's default, the fold."""

    kind: str  # value | list | map | reducing | aggregating
    default: Any = None
    reduce: Callable[[Any, Any], Any] | None = None
    create: Callable[[], Any] | None = None
    add: Callable[[Any, Any], Any] | None = None
    result: Callable[[Any], Any] | None = None
    merge: Callable[[Any, Any], Any] | None = None


Table = dict[tuple[Any, str], Any]


class KeyedModel:
    """Every subtask's keyed state, the current key and namespaces, and the clock."""

    def __init__(
        self, kinds: dict[str, Kind], ttl: ModelTtl | None, parallelism: int, max_parallelism: int
    ) -> None:
        self.kinds = kinds
        self.ttl = ttl
        self.now = 0
        self.key: Any = None
        self.namespace = dict.fromkeys(kinds, "")
        self.parallelism, self.max_parallelism = parallelism, max_parallelism
        self.subtasks: list[dict[str, Table]] = [
            {name: {} for name in kinds} for _ in range(parallelism)
        ]

    # -- placement -------------------------------------------------------------------------
    def subtask_of(self, key: Any) -> int:
        kg = assign_to_key_group(key, self.max_parallelism)
        return compute_operator_index_for_key_group(self.max_parallelism, self.parallelism, kg)

    def checkpoint(self, *, drop_expired: bool = False) -> list[dict[str, Table]]:
        """A deep copy; with ``drop_expired`` (cleanup in full snapshot) without the values,
        list elements and map entries expired by now (the running state keeps them)."""
        out = copy.deepcopy(self.subtasks)
        if drop_expired:
            for sub in out:
                for name, table in sub.items():
                    for slot, stored in list(table.items()):
                        alive = self._unexpired(self.kinds[name].kind, stored)
                        if alive is ABSENT:
                            del table[slot]
                        else:
                            table[slot] = alive
        return out

    def _unexpired(self, kind: str, stored: Any) -> Any:
        if kind == "list":
            elements = [(v, ts) for v, ts in stored if not self._expired(ts)]
            return elements or ABSENT
        if kind == "map":
            entries = {k: (v, ts) for k, (v, ts) in stored.items() if not self._expired(ts)}
            return entries or ABSENT
        return ABSENT if self._expired(stored[1]) else stored

    def restore(
        self, checkpoint: list[dict[str, Table]], parallelism: int, max_parallelism: int
    ) -> None:
        self.parallelism, self.max_parallelism = parallelism, max_parallelism
        self.subtasks = [{name: {} for name in self.kinds} for _ in range(parallelism)]
        for old in copy.deepcopy(checkpoint):
            for name, table in old.items():
                for (key, ns), stored in table.items():
                    self.subtasks[self.subtask_of(key)][name][(key, ns)] = stored
        self.namespace = dict.fromkeys(self.kinds, "")

    def keys(self, name: str, namespace: str) -> list[list[Any]]:
        """Per subtask, the sorted keys with a (possibly expired) value in ``namespace``."""
        return [sorted(k for k, ns in sub[name] if ns == namespace) for sub in self.subtasks]

    # -- the stored form -------------------------------------------------------------------
    def _table(self, name: str) -> Table:
        return self.subtasks[self.subtask_of(self.key)][name]

    def _slot(self, name: str, namespace: str | None = None) -> tuple[Any, str]:
        return (self.key, self.namespace[name] if namespace is None else namespace)

    def _expired(self, ts: int) -> bool:
        return self.ttl is not None and ts + self.ttl.ttl_ms <= self.now

    def _refresh(self) -> bool:
        return self.ttl is not None and self.ttl.update_on_read

    def _returns_expired(self) -> bool:
        return self.ttl is not None and self.ttl.return_expired

    def _get_single(self, name: str) -> Any:
        """Value, reducing, aggregating: the value a read returns (``ABSENT`` when none)."""
        table, slot = self._table(name), self._slot(name)
        if slot not in table:
            return ABSENT
        value, ts = table[slot]
        if self._expired(ts):
            del table[slot]
            return copy.deepcopy(value) if self._returns_expired() else ABSENT
        if self._refresh():
            table[slot] = (value, self.now)
        return copy.deepcopy(value)

    def _put_single(self, name: str, value: Any) -> None:
        self._table(name)[self._slot(name)] = (copy.deepcopy(value), self.now)

    def clear(self, name: str) -> None:
        self._table(name).pop(self._slot(name), None)

    # -- value -----------------------------------------------------------------------------
    def value(self, name: str) -> Any:
        value = self._get_single(name)
        return copy.deepcopy(self.kinds[name].default) if value is ABSENT else value

    def is_set(self, name: str) -> bool:
        """Whether a read would return a stored value (without reading it)."""
        stored = self._table(name).get(self._slot(name))
        return stored is not None and (not self._expired(stored[1]) or self._returns_expired())

    def update(self, name: str, value: Any) -> None:
        if value is None:
            self.clear(name)
        else:
            self._put_single(name, value)

    # -- list ------------------------------------------------------------------------------
    def list_get(self, name: str) -> list[Any]:
        table, slot = self._table(name), self._slot(name)
        stored = table.get(slot, [])
        if not stored:
            return []
        alive = [(v, ts) for v, ts in stored if not self._expired(ts)]
        if self._refresh() and alive:
            alive = [(v, self.now) for v, _ in alive]
            table[slot] = alive
        elif len(alive) != len(stored):
            self._store_list(name, alive)
        shown = stored if self._returns_expired() else alive
        return [copy.deepcopy(v) for v, _ in shown]

    def _store_list(self, name: str, elements: list[tuple[Any, int]]) -> None:
        if elements:
            self._table(name)[self._slot(name)] = elements
        else:
            self.clear(name)

    def list_add_all(self, name: str, values: Sequence[Any]) -> None:
        current = self._table(name).get(self._slot(name), [])
        self._store_list(name, current + [(v, self.now) for v in values])

    def list_update(self, name: str, values: Sequence[Any]) -> None:
        self._store_list(name, [(v, self.now) for v in values])

    # -- map -------------------------------------------------------------------------------
    def _entries(self, name: str) -> dict[Any, tuple[Any, int]]:
        return dict(self._table(name).get(self._slot(name), {}))

    def _store_map(self, name: str, entries: dict[Any, tuple[Any, int]]) -> None:
        if entries:
            self._table(name)[self._slot(name)] = entries
        else:
            self.clear(name)

    def _map_read(self, entries: dict[Any, tuple[Any, int]], key: Any) -> Any:
        if key not in entries:
            return ABSENT
        value, ts = entries[key]
        if self._expired(ts):
            del entries[key]
            return value if self._returns_expired() else ABSENT
        if self._refresh():
            entries[key] = (value, self.now)
        return value

    def map_get(self, name: str, key: Any) -> Any:
        entries = self._entries(name)
        value = self._map_read(entries, key)
        self._store_map(name, entries)
        return None if value is ABSENT else value

    def map_contains(self, name: str, key: Any) -> bool:
        entries = self._entries(name)
        value = self._map_read(entries, key)
        self._store_map(name, entries)
        return value is not ABSENT

    def map_items(self, name: str) -> dict[Any, Any]:
        entries = self._entries(name)
        out = {}
        for key in list(entries):
            value = self._map_read(entries, key)
            if value is not ABSENT:
                out[key] = value
        self._store_map(name, entries)
        return out

    def map_put(self, name: str, key: Any, value: Any) -> None:
        entries = self._entries(name)
        entries[key] = (value, self.now)
        self._store_map(name, entries)

    def map_remove(self, name: str, key: Any) -> None:
        entries = self._entries(name)
        entries.pop(key, None)
        self._store_map(name, entries)

    # -- reducing and aggregating ----------------------------------------------------------
    def folded_get(self, name: str) -> Any:
        kind = self.kinds[name]
        value = self._get_single(name)
        if value is ABSENT:
            return None
        return value if kind.kind == "reducing" else kind.result(value)  # type: ignore[misc]

    def folded_add(self, name: str, value: Any) -> None:
        kind = self.kinds[name]
        current = self._get_single(name)
        if kind.kind == "reducing":
            new = value if current is ABSENT else kind.reduce(current, value)  # type: ignore[misc]
        else:
            acc = kind.create() if current is ABSENT else current  # type: ignore[misc]
            new = kind.add(value, acc)  # type: ignore[misc]
        self._put_single(name, new)

    def merge_namespaces(self, name: str, target: str, sources: Sequence[str]) -> None:
        """Flink's ``mergeNamespaces`` (``AbstractHeapMergingState``): the sources' stored values
        folded in order, then into the target's. Under TTL a list merges its stored elements as
        they are (expired ones too, with their timestamps); reducing and aggregating states
        merge through ``TtlReduceFunction``/``TtlAggregateFunction``: an expired side counts
        only under ``RETURN_EXPIRED_IF_NOT_CLEANED_UP``, and a merged value is stamped now, but a
        single source moved to an empty target keeps its timestamp."""
        kind = self.kinds[name]
        table = self._table(name)
        merge: Callable[[Any, Any], Any]
        if kind.kind == "list":
            merge = lambda a, b: a + b  # noqa: E731
        else:
            fold = kind.reduce if kind.kind == "reducing" else kind.merge
            merge = lambda a, b: self._ttl_merge(fold, a, b)  # type: ignore[arg-type]  # noqa: E731
        merged = ABSENT
        for source in sources:
            stored = table.pop((self.key, source), ABSENT)
            if stored is not ABSENT:
                merged = stored if merged is ABSENT else merge(merged, stored)
        if merged is ABSENT:
            return
        existing = table.get((self.key, target), ABSENT)
        if existing is not ABSENT:
            merged = merge(existing, merged)
        if merged is ABSENT:
            table.pop((self.key, target), None)
        else:
            table[(self.key, target)] = merged

    def _ttl_merge(
        self, fold: Callable[[Any, Any], Any], a: tuple[Any, int] | Any, b: tuple[Any, int] | Any
    ) -> Any:
        def unexpired(stored: Any) -> Any:
            if stored is ABSENT or (self._expired(stored[1]) and not self._returns_expired()):
                return ABSENT
            return stored[0]

        ua, ub = unexpired(a), unexpired(b)
        if ua is not ABSENT and ub is not ABSENT:
            return (fold(ua, ub), self.now)
        if ua is not ABSENT:
            return (ua, self.now)
        return ABSENT if ub is ABSENT else (ub, self.now)


class TimerModel:
    """Event-time timers of a function, one per key and timestamp, fired by the watermark."""

    def __init__(self) -> None:
        self.timers: set[tuple[int, Any]] = set()
        self.watermark: int | None = None

    def register(self, key: Any, timestamp: int) -> None:
        self.timers.add((timestamp, key))

    def delete(self, key: Any, timestamp: int) -> None:
        self.timers.discard((timestamp, key))

    def advance(
        self,
        watermark: int,
        on_timer: Callable[[Any, int], list[Any]],
        order: Sequence[tuple[int, Any]] = (),
    ) -> list[Any]:
        """Fire every timer at or below the watermark (never moving it back), lowest timestamp
        first; ``on_timer(key, timestamp)`` may register more. Timers of one timestamp fire in
        no defined order (Flink's neither): ``order`` is the ``(timestamp, key)`` order the
        system under test chose, followed where it is a valid choice. Returns the outputs."""
        self.watermark = watermark if self.watermark is None else max(self.watermark, watermark)
        fired: list[Any] = []
        chosen = list(order)
        while self.timers:
            first = min(ts for ts, _ in self.timers)
            if first > self.watermark:
                break
            due = sorted((k for ts, k in self.timers if ts == first), key=repr)
            key = due[0]
            if chosen:
                choice = chosen.pop(0)
                if choice[0] == first and choice[1] in due:
                    key = choice[1]
                else:
                    chosen = []  # not a valid choice: fire the model's, the outputs will differ
            self.timers.discard((first, key))
            fired.extend(on_timer(key, first))
        return fired


def redistribute(
    mode: str, parts: Sequence[Sequence[Any]], new_parallelism: int, start: int = 0
) -> tuple[list[list[Any]], int]:
    """What each new instance gets of one operator state (Flink's
    ``RoundRobinOperatorStateRepartitioner``), and where the next split state starts.

    ``split``: all elements in order of old instance, cut into ``new_parallelism`` contiguous
    parts, the first ``len % p`` (counted from ``start``, round robin) one longer; ``union``:
    everything to everyone; ``broadcast``: instance ``i`` gets old instance ``i % old_p``. At an
    unchanged parallelism split state stays where it was."""
    old_p = len(parts)
    if mode == "union":
        everything = [e for part in parts for e in part]
        return [list(everything) for _ in range(new_parallelism)], start
    if mode == "broadcast" or old_p == new_parallelism:
        return [list(parts[i % old_p]) for i in range(new_parallelism)], start
    elements = [e for part in parts for e in part]
    base, extra = divmod(len(elements), new_parallelism)
    sizes = [0] * new_parallelism
    order = [(start + i) % new_parallelism for i in range(new_parallelism)]
    for n, index in enumerate(order):
        sizes[index] = base + (1 if n < extra else 0)
    out: list[list[Any]] = [[] for _ in range(new_parallelism)]
    position = 0
    for index in order:
        out[index] = elements[position : position + sizes[index]]
        position += sizes[index]
    next_start = order[extra] if extra < new_parallelism else start
    return out, next_start
