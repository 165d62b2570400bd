"""The backend contract, TTL: a fake clock, every state kind, update type, visibility, cleanup."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import KeyedStateBackend
from statecore.backends.base import snapshot_schema
from statecore.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statecore.errors import StateAccessError
from statecore.keygroups import assign_to_key_group
from statecore.ttl import (
    CleanupStrategy,
    ManualTimeProvider,
    StateTtlConfig,
    StateVisibility,
    UpdateType,
)
from statecore.types import PICKLED

from .conftest import START_MS, MakeBackend
from .contract import (
    TTL,
    TTL_MS,
    add,
    descriptors,
    read,
    restore_source,
    snapshot_all,
    write_sample,
)

KINDS = ["value", "list", "map", "reducing", "aggregating"]
EMPTY: dict[str, Any] = {
    "value": None,
    "list": [],
    "map": {},
    "reducing": None,
    "aggregating": None,
}

NEVER = StateVisibility.NEVER_RETURN_EXPIRED
RETURN = StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP


def ttl(
    update: UpdateType = UpdateType.ON_CREATE_AND_WRITE,
    visibility: StateVisibility = NEVER,
    cleanup: CleanupStrategy = CleanupStrategy.ON_READ,
    **kw: Any,
) -> StateTtlConfig:
    return StateTtlConfig(ttl=TTL, update_type=update, visibility=visibility, cleanup=cleanup, **kw)


@pytest.mark.parametrize("kind", KINDS)
class TestExpiry:
    def test_visible_until_ttl_then_gone(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider, kind: str
    ) -> None:
        state = backend.get_partitioned_state(descriptors(ttl())[kind])
        backend.set_current_key("a")
        write_sample(state, kind, 1)
        written = read(state, kind)
        clock.advance(TTL_MS - 1)
        assert read(state, kind) == written
        clock.advance(1)  # expired at exactly last access + ttl
        assert read(state, kind) == EMPTY[kind]
        assert list(backend.keys(kind)) == []  # cleaned up on read
        assert backend.snapshot_key_group(kind, backend.current_key_group).num_rows == 0

    def test_return_expired_if_not_cleaned_up(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider, kind: str
    ) -> None:
        state = backend.get_partitioned_state(descriptors(ttl(visibility=RETURN))[kind])
        backend.set_current_key("a")
        write_sample(state, kind, 1)
        written = read(state, kind)
        clock.advance(TTL_MS + 5)
        assert read(state, kind) == written  # still stored: returned, and cleaned up
        assert read(state, kind) == EMPTY[kind]

    @pytest.mark.parametrize("update", list(UpdateType))
    def test_update_type(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider, kind: str, update: UpdateType
    ) -> None:
        state = backend.get_partitioned_state(descriptors(ttl(update))[kind])
        backend.set_current_key("a")
        write_sample(state, kind, 1)
        written = read(state, kind)
        clock.advance(TTL_MS - 1)
        assert read(state, kind) == written  # refreshes only with ON_READ_AND_WRITE
        clock.advance(TTL_MS - 1)
        expected = written if update is UpdateType.ON_READ_AND_WRITE else EMPTY[kind]
        assert read(state, kind) == expected

    def test_writes_refresh(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider, kind: str
    ) -> None:
        state = backend.get_partitioned_state(descriptors(ttl())[kind])
        backend.set_current_key("a")
        write_sample(state, kind, 1)
        clock.advance(TTL_MS - 1)
        write_sample(state, kind, 1)
        clock.advance(TTL_MS - 1)
        assert read(state, kind) != EMPTY[kind]

    def test_snapshot_has_the_ttl_timestamp(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider, kind: str
    ) -> None:
        descriptor = descriptors(ttl())[kind]
        state = backend.get_partitioned_state(descriptor)
        backend.set_current_key("a")
        write_sample(state, kind, 1)
        rows = backend.snapshot_key_group(kind, backend.current_key_group)
        assert rows.schema == snapshot_schema(backend.key_type, descriptor)
        stamps = rows.column("ttl_timestamp").to_pylist()
        if kind == "list":
            assert stamps == [[START_MS, START_MS]]
            assert rows.column("value").to_pylist() == [["e1", "f1"]]
        else:
            assert set(stamps) == {START_MS}

    def test_restore_keeps_the_timestamps(
        self,
        backend: KeyedStateBackend,
        make_backend: MakeBackend,
        clock: ManualTimeProvider,
        kind: str,
        target_backend: str,
    ) -> None:
        descriptor = descriptors(ttl())[kind]
        state = backend.get_partitioned_state(descriptor)
        backend.set_current_key("a")
        write_sample(state, kind, 1)
        written = read(state, kind)
        clock.advance(TTL_MS // 2)
        snapshots = {kind: snapshot_all(backend, kind)}
        restored = make_backend(restore_source=restore_source(snapshots), backend=target_backend)
        handle = restored.get_partitioned_state(descriptor)
        restored.set_current_key("a")
        assert read(handle, kind) == written
        clock.advance(TTL_MS // 2)
        assert read(handle, kind) == EMPTY[kind]


class TestPerElementAndPerEntry:
    def test_list_elements_expire_one_by_one(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        state = backend.get_partitioned_state(ListStateDescriptor("l", int, ttl=ttl()))
        backend.set_current_key("a")
        state.add(1)
        clock.advance(4000)
        state.add_all([2, 3])
        clock.advance(4000)
        state.add(4)
        assert state.get() == [1, 2, 3, 4]
        clock.advance(2000)
        assert state.get() == [2, 3, 4]
        clock.advance(4000)
        assert state.get() == [4]
        rows = backend.snapshot_key_group("l", backend.current_key_group).to_pylist()
        assert rows[0]["value"] == [4] and rows[0]["ttl_timestamp"] == [START_MS + 8000]
        with pytest.raises(StateAccessError):
            state.add(None)

    def test_map_entries_expire_one_by_one(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        state = backend.get_partitioned_state(MapStateDescriptor("m", str, int, ttl=ttl()))
        backend.set_current_key("a")
        state.put("old", 1)
        state.put("none", None)
        clock.advance(6000)
        state["new"] = 2
        assert len(state) == 3 and state.contains("none") and state.get("none") is None
        clock.advance(4000)
        assert state.get("old") is None and "old" not in state and "none" not in state
        assert dict(state.items()) == {"new": 2}
        assert list(state.keys()) == ["new"] and list(state.values()) == [2]
        assert not state.is_empty()
        clock.advance(6000)
        assert state.is_empty() and len(state) == 0
        with pytest.raises(KeyError):
            _ = state["new"]

    def test_map_read_refreshes_only_the_entry_read(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        state = backend.get_partitioned_state(
            MapStateDescriptor("m", str, int, ttl=ttl(UpdateType.ON_READ_AND_WRITE))
        )
        backend.set_current_key("a")
        state.put_all({"x": 1, "y": 2})
        clock.advance(TTL_MS - 1)
        assert state.get("x") == 1
        clock.advance(TTL_MS - 1)
        assert dict(state.items()) == {"x": 1}

    def test_expired_accumulator_starts_over(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        reducing = backend.get_partitioned_state(ReducingStateDescriptor("r", add, int, ttl=ttl()))
        aggregating = backend.get_partitioned_state(descriptors(ttl())["aggregating"])
        backend.set_current_key("a")
        reducing.add(5)
        aggregating.add(10.0)
        clock.advance(TTL_MS)
        reducing.add(1)
        aggregating.add(2.0)
        assert reducing.get() == 1 and aggregating.get() == 2.0

    def test_value_default_and_none(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int, default=7, ttl=ttl()))
        backend.set_current_key("a")
        assert state.value() == 7
        state.update(1)
        state.update(None)
        assert state.value() == 7
        state.update(2)
        clock.advance(TTL_MS)
        assert state.value() == 7
        with pytest.raises(StateAccessError):
            state.update("x")

    def test_pickled_values_with_ttl(
        self, backend: KeyedStateBackend, make_backend: MakeBackend
    ) -> None:
        descriptor = ValueStateDescriptor("o", PICKLED, ttl=ttl())
        state = backend.get_partitioned_state(descriptor)
        backend.set_current_key("a")
        state.update({"set": {1, 2}})
        assert state.value() == {"set": {1, 2}}
        rows = snapshot_all(backend, "o")
        assert next(iter(rows.values())).schema.field("value").type == pa.binary()
        restored = make_backend(restore_source=restore_source({"o": rows}))
        handle = restored.get_partitioned_state(descriptor)
        restored.set_current_key("a")
        assert handle.value() == {"set": {1, 2}}

    def test_merge_namespaces_drops_expired(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        state = backend.get_partitioned_state(ReducingStateDescriptor("r", add, int, ttl=ttl()))
        backend.set_current_key("a")
        state.set_current_namespace("old")
        state.add(100)
        clock.advance(TTL_MS)
        state.set_current_namespace("new")
        state.add(1)
        state.merge_namespaces("target", ["old", "new"])
        state.set_current_namespace("target")
        assert state.get() == 1


class TestCleanup:
    @pytest.mark.parametrize("kind", KINDS)
    def test_full_snapshot_leaves_expired_out(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider, kind: str
    ) -> None:
        state = backend.get_partitioned_state(
            descriptors(ttl(cleanup=CleanupStrategy.FULL_SNAPSHOT))[kind]
        )
        backend.set_current_key("old")
        write_sample(state, kind, 1)
        clock.advance(TTL_MS // 2)
        backend.set_current_key("new")
        write_sample(state, kind, 2)
        clock.advance(TTL_MS // 2)
        rows = [
            r
            for kg in backend.key_group_range
            for r in backend.snapshot_key_group(kind, kg).to_pylist()
        ]
        assert {r["key"] for r in rows} == {"new"}
        assert sorted(backend.keys(kind)) == ["new", "old"]  # a snapshot does not delete

    def test_full_snapshot_filters_list_elements(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        state = backend.get_partitioned_state(
            ListStateDescriptor("l", int, ttl=ttl(cleanup=CleanupStrategy.FULL_SNAPSHOT))
        )
        backend.set_current_key("a")
        state.add_all([1, 2])
        clock.advance(TTL_MS // 2)
        state.add(3)
        clock.advance(TTL_MS // 2)
        rows = backend.snapshot_key_group("l", backend.current_key_group).to_pylist()
        assert rows == [
            {"key": "a", "namespace": "", "value": [3], "ttl_timestamp": [START_MS + TTL_MS // 2]}
        ]

    def test_on_read_keeps_unread_expired_entries(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int, ttl=ttl()))
        backend.set_current_key("a")
        state.update(1)
        clock.advance(TTL_MS)
        assert backend.snapshot_key_group("v", backend.current_key_group).num_rows == 1
        assert state.value() is None
        assert backend.changed_key_groups("v") == {backend.current_key_group}

    @pytest.mark.parametrize("kind", KINDS)
    def test_incremental_cleanup_on_access(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider, kind: str
    ) -> None:
        if not backend.incremental_ttl_cleanup:
            pytest.skip("this backend cleans up on read and in snapshots only")
        config = ttl(cleanup=CleanupStrategy.INCREMENTAL, cleanup_size=3)
        state = backend.get_partitioned_state(descriptors(config)[kind])
        stale = [f"stale-{i}" for i in range(6)]
        for key in stale:
            backend.set_current_key(key)
            write_sample(state, kind, 1)
        clock.advance(TTL_MS)
        backend.set_current_key("fresh")
        write_sample(state, kind, 2)  # one access: up to 3 entries visited
        remaining = set(backend.keys(kind))
        assert "fresh" in remaining and len(remaining & set(stale)) >= 3
        for _ in range(4):
            read(state, kind)
        assert set(backend.keys(kind)) == {"fresh"}
        assert {assign_to_key_group(k, 128) for k in stale} <= backend.changed_key_groups(kind)

    def test_incremental_cleanup_for_every_record(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        if not backend.incremental_ttl_cleanup:
            pytest.skip("this backend cleans up on read and in snapshots only")
        config = ttl(
            cleanup=CleanupStrategy.INCREMENTAL, cleanup_size=2, run_cleanup_for_every_record=True
        )
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int, ttl=config))
        for i in range(6):
            backend.set_current_key(f"k{i}")
            state.update(i)
        clock.advance(TTL_MS)
        for i in range(4):  # records that never touch the state still clean it
            backend.set_current_key(f"other-{i}")
        assert list(backend.keys("v")) == []

    def test_incremental_cleanup_is_accepted_everywhere(
        self, backend: KeyedStateBackend, clock: ManualTimeProvider
    ) -> None:
        config = ttl(cleanup=CleanupStrategy.INCREMENTAL, run_cleanup_for_every_record=True)
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int, ttl=config))
        backend.set_current_key("a")
        state.update(1)
        clock.advance(TTL_MS)
        assert state.value() is None


class TestTtlMigration:
    def test_ttl_turned_on_starts_the_clock_at_restore(
        self, backend: KeyedStateBackend, make_backend: MakeBackend, clock: ManualTimeProvider
    ) -> None:
        plain = backend.get_partitioned_state(ListStateDescriptor("l", int))
        backend.set_current_key("a")
        plain.add_all([1, 2])
        snapshots = {"l": snapshot_all(backend, "l")}
        clock.advance(TTL_MS * 5)
        restored = make_backend(restore_source=restore_source(snapshots))
        state = restored.get_partitioned_state(ListStateDescriptor("l", int, ttl=ttl()))
        restored.set_current_key("a")
        assert state.get() == [1, 2]
        clock.advance(TTL_MS)
        assert state.get() == []

    def test_ttl_turned_off_keeps_the_values(
        self, backend: KeyedStateBackend, make_backend: MakeBackend, clock: ManualTimeProvider
    ) -> None:
        state = backend.get_partitioned_state(MapStateDescriptor("m", str, int, ttl=ttl()))
        backend.set_current_key("a")
        state.put("x", 1)
        snapshots = {"m": snapshot_all(backend, "m")}
        clock.advance(TTL_MS * 5)
        restored = make_backend(restore_source=restore_source(snapshots))
        plain = restored.get_partitioned_state(MapStateDescriptor("m", str, int))
        restored.set_current_key("a")
        assert dict(plain.items()) == {"x": 1}
