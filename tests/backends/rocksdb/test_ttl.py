"""TTL on RocksDB: the timestamp-first stored form and the bounded cleanup scan."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from statecore.backends.rocksdb import RocksDBKeyedStateBackend, RocksDBOptions
from statecore.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statecore.keygroups import KeyGroupRange
from statecore.ttl import CleanupStrategy, ManualTimeProvider, StateTtlConfig
from statecore.types import TypeInfo

START = 1_700_000_000_000
TTL = StateTtlConfig(ttl=timedelta(seconds=10))


@pytest.fixture
def clock() -> ManualTimeProvider:
    return ManualTimeProvider(START)


@pytest.fixture
def backend(clock: ManualTimeProvider) -> Iterator[RocksDBKeyedStateBackend]:
    made = RocksDBKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        ttl_time_provider=clock,
        options=RocksDBOptions(ttl_cleanup_batch=40),
    )
    yield made
    made.close()


def entries(backend: RocksDBKeyedStateBackend, name: str) -> list[tuple[bytes, bytes]]:
    return list(backend._columns[name].cf.items())  # type: ignore[arg-type]


def test_values_are_stored_timestamp_first(backend: RocksDBKeyedStateBackend) -> None:
    state: Any = backend.get_partitioned_state(ValueStateDescriptor("v", str, ttl=TTL))
    backend.set_current_key("a")
    state.update("hello")
    ((_, stored),) = entries(backend, "v")
    assert stored == START.to_bytes(8, "little") + b"\x01hello"
    rows = backend.snapshot_key_group("v", backend.current_key_group).to_pylist()
    assert rows == [{"key": "a", "namespace": "", "value": "hello", "ttl_timestamp": START}]


def test_cleanup_scan_removes_expired_entries_in_bounded_steps(
    backend: RocksDBKeyedStateBackend, clock: ManualTimeProvider
) -> None:
    state: Any = backend.get_partitioned_state(ValueStateDescriptor("v", int, ttl=TTL))
    for i in range(100):
        backend.set_current_key(f"user-{i}")
        state.update(i)
    clock.advance(5_000)
    for i in range(50):  # refreshed: alive for 10 more seconds
        backend.set_current_key(f"user-{i}")
        state.update(i)
    backend.mark_snapshotted()
    clock.advance(6_000)  # the other 50 expired
    removed = [backend.cleanup_expired() for _ in range(3)]  # 40 entries visited per step
    assert sum(removed) == 50 and all(r <= 40 for r in removed)
    assert len(entries(backend, "v")) == 50
    assert backend.changed_key_groups("v")  # the next snapshot drops them too
    assert backend.cleanup_expired() == 0


def test_cleanup_scan_rewrites_partly_expired_lists_and_maps(
    backend: RocksDBKeyedStateBackend, clock: ManualTimeProvider
) -> None:
    recent: Any = backend.get_partitioned_state(ListStateDescriptor("l", str, ttl=TTL))
    seen: Any = backend.get_partitioned_state(MapStateDescriptor("m", str, int, ttl=TTL))
    backend.set_current_key("a")
    recent.add("old")
    seen.put("old", 1)
    clock.advance(8_000)
    recent.add("new")
    seen.put("new", 2)
    clock.advance(3_000)
    assert backend.cleanup_expired() == 2  # the list rewritten, one map entry deleted
    assert len(entries(backend, "m")) == 1
    backend.set_current_key("a")
    assert recent.get() == ["new"]
    assert dict(seen.items()) == {"new": 2}


def test_incremental_strategy_cleans_while_processing(
    backend: RocksDBKeyedStateBackend, clock: ManualTimeProvider
) -> None:
    config = StateTtlConfig(
        ttl=timedelta(seconds=10),
        cleanup=CleanupStrategy.INCREMENTAL,
        cleanup_size=10,
        run_cleanup_for_every_record=True,
    )
    state: Any = backend.get_partitioned_state(ValueStateDescriptor("v", int, ttl=config))
    for i in range(30):
        backend.set_current_key(f"user-{i}")
        state.update(i)
    clock.advance(20_000)
    backend.set_current_key("fresh")  # ten entries visited per record
    assert 20 <= len(entries(backend, "v")) < 30
    for _ in range(4):  # ... around the column family, from where the last step stopped
        backend.set_current_key("fresh")
    assert len(entries(backend, "v")) == 0
