"""The RocksDB backend against the heap backend, operation by operation, plus what only it does.

The backend contract suite (``tests/backends/test_contract.py``) runs over both backends; these
tests add a randomized differential run, the bulk-load restore, the stored forms and handles.
"""

from __future__ import annotations

import gc
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import BackendParameters, create_backend
from statecore.backends.base import KeyedStateBackend
from statecore.backends.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from statecore.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from statecore.errors import ConfigError, KeyGroupOutOfRangeError, KeyTypeError, StateAccessError
from statecore.keygroups import KeyGroupRange
from statecore.types import PICKLED, TypeInfo
from tests.backends.contract import MEAN_TYPE, Mean

SUM_COUNT = MEAN_TYPE


DESCRIPTORS: list[StateDescriptor] = [
    ValueStateDescriptor("total", float, default=0.0),
    ListStateDescriptor("recent", str),
    MapStateDescriptor("counts", str, int),
    ReducingStateDescriptor("biggest", max, float),
    AggregatingStateDescriptor("mean", Mean(), SUM_COUNT),
]


def make(kind: str, **kwargs: Any) -> KeyedStateBackend:
    return create_backend(
        BackendParameters.of(kind),
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        **kwargs,
    )


@pytest.fixture
def rocks() -> Iterator[RocksDBKeyedStateBackend]:
    backend = make("rocksdb")
    assert isinstance(backend, RocksDBKeyedStateBackend)
    yield backend
    backend.close()


def apply_random_ops(backend: KeyedStateBackend, seed: int, n: int = 3000) -> list[Any]:
    """The same random operations on any backend; everything the states returned."""
    rng = random.Random(seed)
    states = [backend.get_partitioned_state(d) for d in DESCRIPTORS]
    total, recent, counts, biggest, mean = states
    seen: list[Any] = []
    for _ in range(n):
        backend.set_current_key(f"user-{rng.randrange(60)}")
        namespace = rng.choice(["", "", "w1", "w2"])
        for s in states:
            s.set_current_namespace(namespace)
        op = rng.randrange(12)
        amount = round(rng.uniform(0, 100), 2)
        event = rng.choice(["view", "click", "buy"])
        if op == 0:
            total.update(total.value() + amount)  # type: ignore[attr-defined]
        elif op == 1:
            recent.add(event)  # type: ignore[attr-defined]
        elif op == 2:
            recent.update(recent.get()[-3:])  # type: ignore[attr-defined]
        elif op == 3:
            counts.put(event, (counts.get(event) or 0) + 1)  # type: ignore[attr-defined]
        elif op == 4:
            counts.remove(event)  # type: ignore[attr-defined]
        elif op == 5:
            biggest.add(amount)  # type: ignore[attr-defined]
        elif op == 6:
            mean.add(amount)  # type: ignore[attr-defined]
        elif op == 7:
            rng.choice(states).clear()
        elif op == 8:
            recent.add_all([event, event])  # type: ignore[attr-defined]
        elif op == 9:
            counts.put(event, None)  # type: ignore[attr-defined]
        elif op == 10 and namespace:
            for s in (recent, biggest, mean):
                s.merge_namespaces("", [namespace, "w2"])  # type: ignore[attr-defined]
        seen.append(
            (
                total.value(),
                recent.get(),
                sorted(counts.items()),  # type: ignore
                counts.is_empty(),
                len(counts),
                biggest.get(),
                mean.get(),
            )
        )  # type: ignore
    return seen


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=repr)


def test_same_operations_same_results_same_snapshots(rocks: RocksDBKeyedStateBackend) -> None:
    heap = make("heap")
    assert apply_random_ops(heap, seed=1) == apply_random_ops(rocks, seed=1)
    for d in DESCRIPTORS:
        assert rocks.changed_key_groups(d.name) == heap.changed_key_groups(d.name)
        for kg in range(128):
            mine, theirs = rocks.snapshot_key_group(d.name, kg), heap.snapshot_key_group(d.name, kg)
            assert mine.schema == theirs.schema
            assert sorted_rows(mine) == sorted_rows(theirs), (d.name, kg)
        for namespace in ("", "w1", "w2", "absent"):
            assert sorted(rocks.keys(d.name, namespace)) == sorted(heap.keys(d.name, namespace))
    rocks.mark_snapshotted()
    assert all(not rocks.changed_key_groups(d.name) for d in DESCRIPTORS)


@pytest.mark.parametrize(
    ("source", "target"), [("heap", "rocksdb"), ("rocksdb", "heap"), ("rocksdb", "rocksdb")]
)
def test_snapshot_restores_across_backends(source: str, target: str) -> None:
    first = make(source)
    apply_random_ops(first, seed=2)
    snapshots = {
        d.name: [(kg, first.snapshot_key_group(d.name, kg)) for kg in range(128)]
        for d in DESCRIPTORS
    }

    restored = make(target, restore_source=lambda d: iter(snapshots[d.name]))
    try:
        # Continuing on the restored backend matches continuing on the original.
        assert apply_random_ops(restored, seed=3, n=500) == apply_random_ops(first, seed=3, n=500)
        for d in DESCRIPTORS:
            for kg in range(128):
                assert sorted_rows(restored.snapshot_key_group(d.name, kg)) == sorted_rows(
                    first.snapshot_key_group(d.name, kg)
                )
    finally:
        first.close()
        restored.close()


def test_restore_is_a_bulk_load_that_bypasses_the_memtable() -> None:
    heap = make("heap")
    apply_random_ops(heap, seed=4)
    rows = {
        d.name: [(kg, heap.snapshot_key_group(d.name, kg)) for kg in range(128)]
        for d in DESCRIPTORS
    }
    expected = sum(t.num_rows for parts in rows.values() for _, t in parts)
    rocks = make("rocksdb", restore_source=lambda d: iter(rows[d.name]))
    assert isinstance(rocks, RocksDBKeyedStateBackend)
    try:
        for d in DESCRIPTORS:
            rocks.get_partitioned_state(d)
            cf = rocks._columns[d.name].cf
            assert cf.property_int_value("rocksdb.num-entries-active-mem-table") == 0
            assert cf.property_int_value("rocksdb.num-live-versions") is not None
        metrics = rocks.restore_metrics()
        assert metrics["ingested_rows"] == expected
        assert metrics["reused_key_groups"] == 0
        assert not any(rocks.changed_key_groups(d.name) for d in DESCRIPTORS)
    finally:
        rocks.close()


def test_restore_key_group_loads_one_key_group(rocks: RocksDBKeyedStateBackend) -> None:
    total = rocks.get_partitioned_state(DESCRIPTORS[0])
    rocks.set_current_key("user-1")
    kg = rocks.current_key_group
    rows = pa.table(
        {"key": ["user-1"], "namespace": [""], "value": [41.5]},
        schema=rocks.snapshot_key_group("total", kg).schema,
    )
    rocks.restore_key_group("total", kg, rows)
    assert total.value() == 41.5  # type: ignore[attr-defined]


def test_map_entries_are_one_rocksdb_entry_each(rocks: RocksDBKeyedStateBackend) -> None:
    counts = rocks.get_partitioned_state(DESCRIPTORS[2])
    rocks.set_current_key("user-1")
    counts.put_all({"a": 1, "b": 2, "c": None})  # type: ignore[attr-defined]
    counts.set_current_namespace("w")
    counts.put("a", 9)  # type: ignore[attr-defined]
    cf = rocks._columns["counts"].cf
    assert len(list(cf.keys())) == 4
    assert sorted(rocks.keys("counts")) == ["user-1"]
    assert list(rocks.keys("counts", "w")) == ["user-1"]
    counts.set_current_namespace("")
    assert dict(counts.items()) == {"a": 1, "b": 2, "c": None}  # type: ignore[attr-defined]
    assert counts.contains("c") and not counts.contains("d")  # type: ignore[attr-defined]
    counts.clear()
    assert counts.is_empty()  # type: ignore[attr-defined]
    assert len(list(cf.keys())) == 1


def test_list_add_appends_without_rewriting(rocks: RocksDBKeyedStateBackend) -> None:
    recent = rocks.get_partitioned_state(DESCRIPTORS[1])
    rocks.set_current_key("user-1")
    recent.add("a")  # type: ignore[attr-defined]
    recent.add_all(["bb", "ccc"])  # type: ignore[attr-defined]
    cf = rocks._columns["recent"].cf
    (stored,) = list(cf.values())
    assert stored == b"\x01a\x02bb\x03ccc"
    assert recent.get() == ["a", "bb", "ccc"]  # type: ignore[attr-defined]


def test_pickled_values_are_stored_and_snapshotted_as_pickles(
    rocks: RocksDBKeyedStateBackend,
) -> None:
    state = rocks.get_partitioned_state(ValueStateDescriptor("obj", PICKLED))
    rocks.set_current_key("k")
    state.update({"any": ("python", 1)})  # type: ignore[attr-defined]
    assert state.value() == {"any": ("python", 1)}  # type: ignore[attr-defined]
    (value,) = rocks.snapshot_key_group("obj", rocks.current_key_group).column("value").to_pylist()
    assert isinstance(value, bytes)


def test_int_and_bytes_keys() -> None:
    for key_type, key in ((int, 12345), (bytes, b"\x00key")):
        backend = RocksDBKeyedStateBackend(
            key_type=TypeInfo.of(key_type),
            key_group_range=KeyGroupRange(0, 127),
            max_parallelism=128,
        )
        try:
            state = backend.get_partitioned_state(ValueStateDescriptor("v", int))
            backend.set_current_key(key)
            state.update(3)  # type: ignore[attr-defined]
            assert list(backend.keys("v")) == [key]
            assert backend.snapshot_key_group("v", backend.current_key_group).column(
                "key"
            ).to_pylist() == [key]
        finally:
            backend.close()


def test_bad_keys_and_values_fail_at_the_call(rocks: RocksDBKeyedStateBackend) -> None:
    state = rocks.get_partitioned_state(ValueStateDescriptor("v", int))
    with pytest.raises(StateAccessError):
        state.value()  # type: ignore[attr-defined]
    with pytest.raises(KeyTypeError):
        rocks.set_current_key(7)
    narrow = RocksDBKeyedStateBackend(
        key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 9), max_parallelism=128
    )
    try:
        with pytest.raises(KeyGroupOutOfRangeError):
            narrow.set_current_key("user-1")  # key group 86
    finally:
        narrow.close()
    rocks.set_current_key("user-1")
    with pytest.raises(StateAccessError):
        state.update("seven")  # type: ignore[attr-defined]
    with pytest.raises(StateAccessError):
        state.update(2**70)  # type: ignore[attr-defined]


def test_close_releases_the_database_and_the_temporary_directory(tmp_path: Path) -> None:
    options = RocksDBOptions(local_directory=str(tmp_path))
    backend = RocksDBKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        options=options,
    )
    state = backend.get_partitioned_state(DESCRIPTORS[2])
    backend.set_current_key("user-1")
    state.put("a", 1)  # type: ignore[attr-defined]
    directory = Path(backend.directory)
    assert directory.parent == tmp_path and directory.exists()
    backend.close()
    backend.close()  # idempotent
    assert not directory.exists()
    with pytest.raises(Exception):  # noqa: B017 (whatever rocksdict raises on a closed db)
        state.get("a")  # type: ignore[attr-defined]

    # Dropped without close(): the finalizer closes it.
    backend = RocksDBKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        options=options,
    )
    directory = Path(backend.directory)
    del backend
    gc.collect()
    assert not directory.exists()
    assert os.listdir(tmp_path) == []


def test_options_are_validated_and_translated() -> None:
    with pytest.raises(ConfigError):
        RocksDBOptions(block_cache_size=10)
    with pytest.raises(ConfigError):
        RocksDBOptions(max_write_buffer_number=0)
    with pytest.raises(ConfigError):
        RocksDBOptions(compression="brotli")
    with pytest.raises(ConfigError):
        RocksDBOptions(local_directory="")
    options = RocksDBOptions(
        block_cache_size=1 << 20, write_buffer_size=1 << 20, compression="zstd"
    )
    backend = RocksDBKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        options=options,
    )
    try:
        backend.get_partitioned_state(DESCRIPTORS[0])
        cf = backend._columns["total"].cf
        assert cf.property_int_value("rocksdb.block-cache-capacity") == 1 << 20
    finally:
        backend.close()


@pytest.mark.parametrize("kind", [StateKind.LIST, StateKind.REDUCING, StateKind.AGGREGATING])
def test_merge_namespaces_matches_heap(kind: StateKind) -> None:
    (descriptor,) = [d for d in DESCRIPTORS if d.kind is kind]
    results = []
    for name in ("heap", "rocksdb"):
        backend = make(name)
        state: Any = backend.get_partitioned_state(descriptor)
        backend.set_current_key("user-1")
        for namespace, value in (("a", 1.0), ("b", 5.0), ("t", 2.0), ("a", 3.0)):
            state.set_current_namespace(namespace)
            state.add(str(value) if kind is StateKind.LIST else value)
        state.merge_namespaces("t", ["a", "b", "missing"])
        out = []
        for namespace in ("a", "b", "t"):
            state.set_current_namespace(namespace)
            out.append(state.get())
        results.append((out, backend.changed_key_groups(descriptor.name)))
        backend.close()
    assert results[0] == results[1]
