"""Both backends track which keys changed (changelog checkpoints): writes, clears, merges of
namespaces, TTL cleanup; a key left without rows is a tombstone; nothing is tracked when off."""

from __future__ import annotations

from typing import Any

import pytest

from statecore.backends import HeapKeyedStateBackend, RocksDBKeyedStateBackend
from statecore.backends.base import KeyedStateBackend
from statecore.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.ttl import ManualTimeProvider, StateTtlConfig
from statecore.types import TypeInfo

BACKENDS = [HeapKeyedStateBackend, RocksDBKeyedStateBackend]
MAX_P = 128


def make(cls: type[KeyedStateBackend], clock: Any = None) -> KeyedStateBackend:
    backend = cls(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, MAX_P - 1),
        max_parallelism=MAX_P,
        ttl_time_provider=clock,
    )
    backend.enable_change_tracking()
    return backend


def changed(backend: KeyedStateBackend, state: str) -> set[str]:
    return {k for keys in backend.changed_keys(state).values() for k in keys}


@pytest.mark.parametrize("cls", BACKENDS)
def test_changelog_tracks_written_keys_and_tombstones(cls: type[KeyedStateBackend]) -> None:
    backend = make(cls)
    total = backend.get_partitioned_state(ValueStateDescriptor("total", int, default=0))
    pages = backend.get_partitioned_state(MapStateDescriptor("pages", str, int))
    windows = backend.get_partitioned_state(ListStateDescriptor("windows", int))
    for key in ("a", "b", "c"):
        backend.set_current_key(key)
        total.update(1)
        pages.put("x", 1)
        windows.set_current_namespace("w1")
        windows.add(1)
    backend.mark_snapshotted()
    assert changed(backend, "total") == set()
    backend.set_current_key("a")
    total.update(2)
    backend.set_current_key("b")
    total.clear()
    pages.remove("x")
    windows.merge_namespaces("w2", ["w1"])
    assert changed(backend, "total") == {"a", "b"}
    assert changed(backend, "pages") == {"b"}
    assert changed(backend, "windows") == {"b"}
    kg_a, kg_b = assign_to_key_group("a", MAX_P), assign_to_key_group("b", MAX_P)
    rows, tombstones = backend.snapshot_changes("total", kg_a, ["a"])
    assert (rows.to_pylist(), tombstones) == ([{"key": "a", "namespace": "", "value": 2}], [])
    rows, tombstones = backend.snapshot_changes("total", kg_b, ["b"])
    assert (rows.num_rows, tombstones) == (0, ["b"])
    rows, _ = backend.snapshot_changes("windows", kg_b, ["b"])
    assert rows.to_pylist() == [{"key": "b", "namespace": "w2", "value": [1]}]
    backend.close()


@pytest.mark.parametrize("cls", BACKENDS)
def test_changelog_ttl_cleanup_marks_the_cleaned_key(cls: type[KeyedStateBackend]) -> None:
    clock = ManualTimeProvider(0)
    backend = make(cls, clock)
    from datetime import timedelta

    ttl = StateTtlConfig(ttl=timedelta(seconds=1))
    seen = backend.get_partitioned_state(ValueStateDescriptor("seen", int, ttl=ttl))
    for key in ("a", "b"):
        backend.set_current_key(key)
        seen.update(1)
    backend.mark_snapshotted()
    clock.advance(5_000)
    if isinstance(backend, RocksDBKeyedStateBackend):
        backend.cleanup_expired()
    else:
        backend.set_current_key("z")  # not a key that expired
        backend._cleanup_incrementally(
            "seen", backend._ttl["seen"].purge(clock.current_timestamp()), 10
        )
    assert changed(backend, "seen") == {"a", "b"}
    backend.close()


def test_changelog_tracking_is_off_by_default_and_set_before_states() -> None:
    backend = HeapKeyedStateBackend(
        key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 127), max_parallelism=128
    )
    backend.get_partitioned_state(ValueStateDescriptor("total", int, default=0))
    assert type(backend._tables["total"].dirty) is set  # no cost when off
    with pytest.raises(ConfigError, match="changed keys are not tracked"):
        backend.changed_keys("total")
    with pytest.raises(ConfigError, match="before states are registered"):
        backend.enable_change_tracking()
