"""The write-back value cache of the RocksDB backend: with it on, off, smaller than the key set,
and on the heap, the same operations return the same values and snapshot the same rows, through
snapshots and restores in between."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import BackendParameters, create_backend
from statecore.backends.base import KeyedStateBackend
from statecore.backends.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from statecore.backends.rocksdb.cache import ValueCache
from statecore.backends.rocksdb.column import StateColumn
from statecore.descriptors import ListStateDescriptor, StateDescriptor, ValueStateDescriptor
from statecore.errors import ConfigError, StateAccessError
from statecore.keygroups import KeyGroupRange
from statecore.ttl import StateTtlConfig
from statecore.types import PICKLED, TypeInfo
from tests.backends.contract import all_rows, restore_source, snapshot_all

STATES: list[StateDescriptor] = [
    ValueStateDescriptor("count", int, default=0),
    ValueStateDescriptor("total", float),
    ValueStateDescriptor("name", str),
    ValueStateDescriptor("blob", bytes),
    ValueStateDescriptor("flag", bool),
    ValueStateDescriptor("small", pa.int16()),
    ListStateDescriptor("recent", str),
]
CACHES = {"off": 0, "tiny": 3, "small": 40, "default": 100_000}
KEYS = [f"user-{i}" for i in range(300)]
NAMESPACES = ["", "", "w1", "w2"]


def make(kind: str, **kwargs: Any) -> KeyedStateBackend:
    """``heap``, or RocksDB with the value cache of ``CACHES[kind]`` entries."""
    parameters = (
        BackendParameters(name="heap")
        if kind == "heap"
        else BackendParameters(
            name="rocksdb", options=RocksDBOptions(value_cache_entries=CACHES[kind])
        )
    )
    return create_backend(
        parameters,
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        **kwargs,
    )


def column(backend: KeyedStateBackend, name: str) -> StateColumn:
    assert isinstance(backend, RocksDBKeyedStateBackend)
    return backend._columns[name]


def cache(backend: KeyedStateBackend, name: str) -> ValueCache:
    found = column(backend, name).cache
    assert found is not None
    return found


def random_ops(backend: KeyedStateBackend, rng: random.Random, n: int) -> list[Any]:
    """``n`` random reads, updates and clears; everything the states returned."""
    states = [backend.get_partitioned_state(d) for d in STATES]
    count, total, name, blob, flag, small, recent = states
    seen: list[Any] = []
    for _ in range(n):
        backend.set_current_key(rng.choice(KEYS))
        namespace = rng.choice(NAMESPACES)
        for s in states:
            s.set_current_namespace(namespace)
        op = rng.randrange(10)
        if op == 0:
            count.update(count.value() + rng.randrange(1, 5))  # type: ignore[attr-defined]
        elif op == 1:  # an int stored as a float reads back as a float
            total.update(rng.choice([rng.randrange(10), rng.random()]))  # type: ignore
        elif op == 2:
            name.update(rng.choice(["a", "bb", "é" * 3, ""]))  # type: ignore[attr-defined]
        elif op == 3:
            blob.update(bytes([rng.randrange(256)]) * rng.randrange(3))  # type: ignore
        elif op == 4:
            flag.update(rng.random() < 0.5)  # type: ignore[attr-defined]
        elif op == 5:
            small.update(rng.randrange(-100, 100))  # type: ignore[attr-defined]
        elif op == 6:
            rng.choice(states).clear()
        elif op == 7:
            rng.choice([count, total, name, blob, flag, small]).update(None)  # type: ignore
        elif op == 8:
            recent.add(rng.choice(["x", "y"]))  # type: ignore[attr-defined]
        values = [s.value() for s in states[:-1]]  # type: ignore[attr-defined]
        seen.append((values, [type(v) for v in values], recent.get()))  # type: ignore
    return seen


def snapshot(backend: KeyedStateBackend) -> dict[str, dict[int, pa.Table]]:
    return {d.name: snapshot_all(backend, d.name) for d in STATES}


def rows(snapshots: dict[str, dict[int, pa.Table]]) -> dict[str, list[dict[str, Any]]]:
    return {name: all_rows(tables) for name, tables in snapshots.items()}


def test_cache_on_off_and_heap_give_the_same_results_through_snapshots_and_restores() -> None:
    kinds = ["heap", *CACHES]
    backends = {k: make(k) for k in kinds}
    rngs = {k: random.Random(7) for k in kinds}
    try:
        for round_ in range(4):
            results = {k: random_ops(b, rngs[k], 1500) for k, b in backends.items()}
            assert all(results[k] == results["off"] for k in CACHES)  # and the same types
            assert [(v, r) for v, _, r in results["off"]] == [  # the heap keeps an int an int
                (v, r) for v, _, r in results["heap"]
            ]
            for d in STATES:
                changed = {k: b.changed_key_groups(d.name) for k, b in backends.items()}
                assert all(c == changed["heap"] for c in changed.values()), d.name
                for ns in ("", "w1", "w2"):
                    keys = {k: sorted(b.keys(d.name, ns)) for k, b in backends.items()}
                    assert all(v == keys["heap"] for v in keys.values()), (d.name, ns)
            snapshots = {k: snapshot(b) for k, b in backends.items()}
            assert all(rows(s) == rows(snapshots["heap"]) for s in snapshots.values())
            for b in backends.values():
                b.mark_snapshotted()
            if round_ % 2:  # restore each from its own snapshot and carry on
                for k, b in backends.items():
                    b.close()
                    backends[k] = make(k, restore_source=restore_source(snapshots[k]))
                    for d in STATES:
                        backends[k].get_partitioned_state(d)
                assert backends["tiny"].restore_metrics()["ingested_rows"] == sum(
                    t.num_rows for s in snapshots["tiny"].values() for t in s.values()
                )
    finally:
        for b in backends.values():
            b.close()


def test_a_cache_smaller_than_the_keys_flushes_mid_run() -> None:
    backend = make("tiny")
    try:
        count = backend.get_partitioned_state(STATES[0])
        for i, key in enumerate(KEYS[:50]):
            backend.set_current_key(key)
            count.update(i)  # type: ignore[attr-defined]
            assert len(cache(backend, "count").values) <= 3
        stored = list(column(backend, "count").cf.keys())  # RocksDB itself, no flush
        assert 46 <= len(stored) < 50  # all but the last few, written by full caches
        for i, key in enumerate(KEYS[:50]):
            backend.set_current_key(key)
            assert count.value() == i  # type: ignore[attr-defined]
    finally:
        backend.close()


@pytest.mark.parametrize(
    "descriptor",
    [
        ValueStateDescriptor("ttl", int, ttl=StateTtlConfig(ttl=timedelta(hours=1))),
        ValueStateDescriptor("pickled", PICKLED),
        ValueStateDescriptor("point", pa.struct([("x", pa.int64()), ("y", pa.int64())])),
        ValueStateDescriptor("ints", pa.list_(pa.int64())),
        ValueStateDescriptor("rounded", pa.float32()),
        ListStateDescriptor("list", int),
    ],
    ids=lambda d: d.name,
)
def test_mutable_ttl_and_rounded_values_bypass_the_cache(descriptor: StateDescriptor) -> None:
    backend = make("default")
    try:
        backend.get_partitioned_state(descriptor)
        assert column(backend, descriptor.name).cache is None
    finally:
        backend.close()


def test_the_cache_can_be_turned_off_and_is_validated() -> None:
    backend = make("off")
    try:
        backend.get_partitioned_state(STATES[0])
        assert column(backend, "count").cache is None
    finally:
        backend.close()
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ConfigError, match="value_cache_entries"):
            RocksDBOptions(value_cache_entries=bad)  # type: ignore[arg-type]


def test_snapshots_and_keys_see_values_only_in_the_cache() -> None:
    backend = make("default")
    try:
        count = backend.get_partitioned_state(STATES[0])
        backend.set_current_key("user-1")
        count.update(5)  # type: ignore[attr-defined]
        count.set_current_namespace("w1")
        count.update(6)  # type: ignore[attr-defined]
        assert cache(backend, "count").pending and not list(column(backend, "count").cf.keys())
        assert list(backend.keys("count")) == ["user-1"] == list(backend.keys("count", "w1"))
        [kg] = backend.changed_key_groups("count")
        table = backend.snapshot_key_group("count", kg)
        assert sorted(table.column("value").to_pylist()) == [5, 6]
        assert not cache(backend, "count").pending
        count.clear()  # a tombstone in the cache, then in the next snapshot
        assert backend.snapshot_key_group("count", kg).column("value").to_pylist() == [5]
    finally:
        backend.close()


def test_values_that_cannot_be_stored_fail_at_the_update() -> None:
    backend = make("default")
    try:
        count, total, name = (backend.get_partitioned_state(d) for d in STATES[:3])
        small = backend.get_partitioned_state(STATES[5])
        backend.set_current_key("user-1")
        for state, bad in ((count, 1 << 70), (small, 1 << 20), (name, "\ud800"), (total, "x")):
            with pytest.raises(StateAccessError):
                state.update(bad)  # type: ignore[attr-defined]
        total.update(3)  # type: ignore[attr-defined]
        assert total.value() == 3.0 and type(total.value()) is float  # type: ignore
        assert not any(cache(backend, n).pending for n in ("count", "small", "name"))
    finally:
        backend.close()


def test_a_closed_backend_neither_loses_flushed_values_nor_serves_cached_ones() -> None:
    backend = make("tiny")
    count = backend.get_partitioned_state(STATES[0])
    for i, key in enumerate(KEYS[:20]):
        backend.set_current_key(key)
        count.update(i)  # type: ignore[attr-defined]
    snapshots = {"count": snapshot_all(backend, "count")}
    backend.close()
    with pytest.raises(StateAccessError):
        count.value()  # type: ignore[attr-defined]
    restored = make("tiny", restore_source=restore_source(snapshots))
    try:
        again = restored.get_partitioned_state(STATES[0])
        for i, key in enumerate(KEYS[:20]):
            restored.set_current_key(key)
            assert again.value() == i  # type: ignore[attr-defined]
            again.update(i + 100)  # type: ignore[attr-defined]
        assert sorted(r["value"] for r in all_rows(snapshot_all(restored, "count"))) == list(
            range(100, 120)
        )
    finally:
        restored.close()
