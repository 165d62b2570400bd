"""Helpers shared by the contract suite: descriptors of every kind, and snapshot plumbing."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa

from statecore.backends import KeyedStateBackend
from statecore.backends.base import RestoreSource
from statecore.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.ttl import StateTtlConfig

TTL = timedelta(seconds=10)
TTL_MS = 10_000


class Mean(AggregateFunction[float, dict[str, Any], float]):
    def create_accumulator(self) -> dict[str, Any]:
        return {"sum": 0.0, "count": 0}

    def add(self, value: float, acc: dict[str, Any]) -> dict[str, Any]:
        return {"sum": acc["sum"] + value, "count": acc["count"] + 1}

    def get_result(self, acc: dict[str, Any]) -> float:
        return float(acc["sum"] / acc["count"])

    def merge(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {"sum": a["sum"] + b["sum"], "count": a["count"] + b["count"]}


MEAN_TYPE = pa.struct([("sum", pa.float64()), ("count", pa.int64())])


def add(a: int, b: int) -> int:
    return a + b


def descriptors(ttl: StateTtlConfig | None = None) -> dict[str, StateDescriptor]:
    """One descriptor of each kind (names: value, list, map, reducing, aggregating)."""
    return {
        "value": ValueStateDescriptor("value", int, ttl=ttl),
        "list": ListStateDescriptor("list", str, ttl=ttl),
        "map": MapStateDescriptor("map", str, int, ttl=ttl),
        "reducing": ReducingStateDescriptor("reducing", add, int, ttl=ttl),
        "aggregating": AggregatingStateDescriptor("aggregating", Mean(), MEAN_TYPE, ttl=ttl),
    }


def write_sample(state: Any, kind: str, seed: int) -> None:
    """Write a value derived from ``seed`` into ``state`` of ``kind`` for the current key."""
    if kind == "value":
        state.update(seed)
    elif kind == "list":
        state.add_all([f"e{seed}", f"f{seed}"])
    elif kind == "map":
        state.put_all({f"k{seed}": seed, "common": -seed})
    elif kind in ("reducing", "aggregating"):
        state.add(seed)
        state.add(seed + 1)


def read(state: Any, kind: str) -> Any:
    """What ``state`` of ``kind`` holds for the current key, comparably."""
    if kind == "value":
        return state.value()
    if kind == "map":
        return dict(state.items())
    return state.get()


def key_in_range(
    key_group_range: KeyGroupRange, max_parallelism: int = 128, prefix: str = "k"
) -> Iterator[str]:
    """String keys whose key group is in ``key_group_range``."""
    i = 0
    while True:
        key = f"{prefix}{i}"
        if assign_to_key_group(key, max_parallelism) in key_group_range:
            yield key
        i += 1


def snapshot_all(backend: KeyedStateBackend, name: str) -> dict[int, pa.Table]:
    """Every non-empty key group of ``name``."""
    out = {}
    for kg in backend.key_group_range:
        rows = backend.snapshot_key_group(name, kg)
        if rows.num_rows:
            out[kg] = rows
    return out


def restore_source(
    snapshots: dict[str, dict[int, pa.Table]], key_groups: KeyGroupRange | None = None
) -> RestoreSource:
    """A restore source over ``{state: {key_group: rows}}``, limited to ``key_groups``."""

    def source(descriptor: StateDescriptor) -> Iterable[tuple[int, pa.Table]]:
        return [
            (kg, rows)
            for kg, rows in sorted(snapshots.get(descriptor.name, {}).items())
            if key_groups is None or kg in key_groups
        ]

    return source


def all_rows(tables: dict[int, pa.Table]) -> list[dict[str, Any]]:
    rows = [r for kg in sorted(tables) for r in tables[kg].to_pylist()]
    return sorted(rows, key=repr)
