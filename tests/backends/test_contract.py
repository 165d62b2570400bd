"""The keyed state backend contract: every method of every state kind, on every backend.

Runs over ``BACKENDS`` in ``conftest.py``; TTL and timers are in ``test_contract_ttl.py`` and
``test_contract_timers.py``. A backend passes these unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import KeyedStateBackend
from statecore.backends.base import snapshot_schema
from statecore.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statecore.errors import (
    KeyGroupOutOfRangeError,
    StateAccessError,
    StateDescriptorConflictError,
    UnknownStateError,
)
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.state import VOID_NAMESPACE
from statecore.types import PICKLED, TypeInfo

from .conftest import MakeBackend
from .contract import (
    MEAN_TYPE,
    Mean,
    add,
    all_rows,
    descriptors,
    key_in_range,
    read,
    restore_source,
    snapshot_all,
    write_sample,
)

KINDS = ["value", "list", "map", "reducing", "aggregating"]


# -- the current key ----------------------------------------------------------------------
class TestCurrentKey:
    def test_state_needs_a_current_key(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int))
        with pytest.raises(StateAccessError, match="'v' used outside a keyed context"):
            state.value()
        with pytest.raises(StateAccessError, match="outside a keyed context"):
            state.update(1)
        with pytest.raises(StateAccessError, match="no current key"):
            _ = backend.current_key

    def test_current_key_and_key_group(self, backend: KeyedStateBackend) -> None:
        backend.set_current_key("user-1")
        assert backend.current_key == "user-1"
        assert backend.current_key_group == assign_to_key_group("user-1", 128)
        backend.set_current_key("user-2", 5)  # a key group computed elsewhere is trusted
        assert backend.current_key_group == 5

    def test_key_outside_the_range(self, make_backend: MakeBackend) -> None:
        backend = make_backend(key_group_range=KeyGroupRange(0, 63))
        outside = next(key_in_range(KeyGroupRange(64, 127)))
        message = "outside this backend's key groups 0..63"
        with pytest.raises(KeyGroupOutOfRangeError, match=re.escape(message)):
            backend.set_current_key(outside)

    @pytest.mark.parametrize("key_type,keys", [(int, [1, -7, 2**40]), (bytes, [b"a", b"\x00"])])
    def test_int_and_bytes_keys(
        self, make_backend: MakeBackend, key_type: type, keys: list[Any]
    ) -> None:
        backend = make_backend(key_type=TypeInfo.of(key_type))
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int))
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            state.update(i)
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            assert state.value() == i
        assert sorted(backend.keys("v")) == sorted(keys)


# -- handles ------------------------------------------------------------------------------
class TestHandles:
    def test_one_handle_per_name(self, backend: KeyedStateBackend) -> None:
        for descriptor in descriptors().values():
            first = backend.get_partitioned_state(descriptor)
            assert backend.get_partitioned_state(descriptor) is first
        assert sorted(backend.descriptors) == sorted(KINDS)
        assert backend.descriptor("map").kind.value == "map"

    def test_same_name_other_kind_names_both(self, backend: KeyedStateBackend) -> None:
        backend.get_partitioned_state(ValueStateDescriptor("total", int))
        with pytest.raises(StateDescriptorConflictError) as error:
            backend.get_partitioned_state(ListStateDescriptor("total", int))
        assert "'total'" in str(error.value)
        assert "value" in str(error.value) and "list" in str(error.value)

    def test_same_name_other_type_names_both(self, backend: KeyedStateBackend) -> None:
        backend.get_partitioned_state(ValueStateDescriptor("total", int))
        with pytest.raises(StateDescriptorConflictError) as error:
            backend.get_partitioned_state(ValueStateDescriptor("total", str))
        assert "int64" in str(error.value) and "string" in str(error.value)

    def test_unknown_state(self, backend: KeyedStateBackend) -> None:
        with pytest.raises(UnknownStateError, match="nope"):
            list(backend.keys("nope"))
        with pytest.raises(UnknownStateError):
            backend.snapshot_key_group("nope", 0)


# -- value state --------------------------------------------------------------------------
class TestValueState:
    def test_value_update_clear(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int))
        backend.set_current_key("a")
        assert state.value() is None
        state.update(3)
        assert state.value() == 3
        backend.set_current_key("b")
        assert state.value() is None
        state.update(4)
        backend.set_current_key("a")
        assert state.value() == 3
        state.clear()
        assert state.value() is None
        state.clear()  # clearing nothing is fine
        assert list(backend.keys("v")) == ["b"]

    def test_default_value(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int, default=10))
        backend.set_current_key("a")
        assert state.value() == 10
        state.update(0)
        assert state.value() == 0
        state.clear()
        assert state.value() == 10
        assert list(backend.keys("v")) == []

    def test_update_none_clears(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int, default=-1))
        backend.set_current_key("a")
        state.update(5)
        state.update(None)
        assert state.value() == -1
        assert list(backend.keys("v")) == []

    def test_wrong_type_is_rejected(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int))
        backend.set_current_key("a")
        with pytest.raises(StateAccessError, match="does not match the declared type int64"):
            state.update("3")
        with pytest.raises(StateAccessError):
            state.update(True)
        assert state.value() is None

    def test_struct_and_pickled_values(self, backend: KeyedStateBackend) -> None:
        point = pa.struct([("x", pa.int64()), ("y", pa.float64())])
        structs = backend.get_partitioned_state(ValueStateDescriptor("s", point))
        objects = backend.get_partitioned_state(ValueStateDescriptor("o", PICKLED))
        backend.set_current_key("a")
        structs.update({"x": 1, "y": 2.5})
        objects.update({"any": ("python", 1)})
        assert structs.value() == {"x": 1, "y": 2.5}
        assert objects.value() == {"any": ("python", 1)}


# -- list state ---------------------------------------------------------------------------
class TestListState:
    def test_get_add_add_all_update_clear(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ListStateDescriptor("l", str))
        backend.set_current_key("a")
        assert state.get() == []
        state.add("x")
        state.add_all(["y", "z"])
        state.add_all([])
        assert state.get() == ["x", "y", "z"]
        state.update(["q"])
        assert state.get() == ["q"]
        state.update([])
        assert state.get() == []
        assert list(backend.keys("l")) == []
        state.add_all(["r", "s"])
        state.clear()
        assert state.get() == []

    def test_get_returns_a_copy(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ListStateDescriptor("l", int))
        backend.set_current_key("a")
        state.add_all([1, 2])
        got = state.get()
        got.append(3)
        assert state.get() == [1, 2]

    def test_none_is_an_error(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ListStateDescriptor("l", int))
        backend.set_current_key("a")
        state.add(1)
        with pytest.raises(StateAccessError):
            state.add(None)
        with pytest.raises(StateAccessError):
            state.add_all([2, None])
        with pytest.raises(StateAccessError):
            state.update([None])
        with pytest.raises(StateAccessError):
            state.update(None)  # type: ignore[arg-type]
        with pytest.raises(StateAccessError):
            state.add("1")
        assert state.get() == [1]

    def test_merge_namespaces(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ListStateDescriptor("l", int))
        backend.set_current_key("a")
        for ns, values in (("w1", [1]), ("w2", [2, 3]), ("w3", [4])):
            state.set_current_namespace(ns)
            state.add_all(values)
        state.set_current_namespace("w1")
        state.merge_namespaces("w3", ["w1", "w2", "missing"])
        assert state.get() == []  # the current namespace stays w1, now merged away
        state.set_current_namespace("w3")
        assert state.get() == [4, 1, 2, 3]
        assert list(backend.keys("l", "w2")) == []


# -- map state ----------------------------------------------------------------------------
class TestMapState:
    def test_methods(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(MapStateDescriptor("m", str, int))
        backend.set_current_key("a")
        assert state.get("x") is None
        assert state.is_empty()
        assert not state.contains("x")
        state.put("x", 1)
        state.put_all({"y": 2, "z": 3})
        assert state.get("x") == 1
        assert state.contains("y")
        assert sorted(state.keys()) == ["x", "y", "z"]
        assert sorted(state.values()) == [1, 2, 3]
        assert sorted(state.items()) == [("x", 1), ("y", 2), ("z", 3)]
        assert not state.is_empty()
        state.remove("y")
        state.remove("missing")
        assert sorted(state.keys()) == ["x", "z"]
        state.clear()
        assert state.is_empty() and list(backend.keys("m")) == []

    def test_dunders(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(MapStateDescriptor("m", str, int))
        backend.set_current_key("a")
        state["x"] = 1
        state["y"] = 2
        assert state["x"] == 1
        assert "x" in state and "q" not in state
        assert len(state) == 2
        assert sorted(state) == ["x", "y"]
        del state["x"]
        assert len(state) == 1
        with pytest.raises(KeyError):
            _ = state["x"]
        with pytest.raises(KeyError):
            del state["x"]

    def test_none_values_are_kept(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(MapStateDescriptor("m", str, int))
        backend.set_current_key("a")
        state.put("x", None)
        assert state.contains("x") and state.get("x") is None and state["x"] is None
        assert list(state.items()) == [("x", None)]
        with pytest.raises(StateAccessError):
            state.put(None, 1)
        with pytest.raises(StateAccessError):
            state.put("y", "not an int")

    def test_items_may_be_modified_while_iterating(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(MapStateDescriptor("m", int, int))
        backend.set_current_key("a")
        state.put_all({i: i for i in range(5)})
        for k, v in state.items():
            if v % 2:
                state.remove(k)
            else:
                state.put(k, v * 10)
        assert dict(state.items()) == {0: 0, 2: 20, 4: 40}


# -- reducing and aggregating state -------------------------------------------------------
class TestReducingState:
    def test_get_add_clear(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ReducingStateDescriptor("r", max, int))
        backend.set_current_key("a")
        assert state.get() is None
        for v in (3, 9, 4):
            state.add(v)
        assert state.get() == 9
        with pytest.raises(StateAccessError):
            state.add(None)
        state.clear()
        assert state.get() is None

    def test_merge_namespaces(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ReducingStateDescriptor("r", add, int))
        backend.set_current_key("a")
        for ns, v in (("w1", 1), ("w2", 10), ("w3", 100)):
            state.set_current_namespace(ns)
            state.add(v)
        state.merge_namespaces("w3", ["w1", "w2"])
        state.set_current_namespace("w3")
        assert state.get() == 111
        state.set_current_namespace("w1")
        assert state.get() is None


class TestAggregatingState:
    def test_get_add_clear(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(AggregatingStateDescriptor("avg", Mean(), MEAN_TYPE))
        backend.set_current_key("a")
        assert state.get() is None
        state.add(1.0)
        state.add(3.0)
        assert state.get() == 2.0
        with pytest.raises(StateAccessError):
            state.add(None)
        state.clear()
        assert state.get() is None

    def test_merge_namespaces_uses_merge(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(AggregatingStateDescriptor("avg", Mean(), MEAN_TYPE))
        backend.set_current_key("a")
        for ns, values in (("w1", [1.0, 2.0]), ("w2", [6.0])):
            state.set_current_namespace(ns)
            for v in values:
                state.add(v)
        state.merge_namespaces("w2", ["w1"])
        state.set_current_namespace("w2")
        assert state.get() == 3.0


# -- namespaces ---------------------------------------------------------------------------
class TestNamespaces:
    @pytest.mark.parametrize("kind", KINDS)
    def test_values_are_scoped_by_namespace(self, backend: KeyedStateBackend, kind: str) -> None:
        state = backend.get_partitioned_state(descriptors()[kind])
        backend.set_current_key("a")
        write_sample(state, kind, 1)
        state.set_current_namespace("window-1")
        assert read(state, kind) in (None, [], {})
        write_sample(state, kind, 2)
        second = read(state, kind)
        state.set_current_namespace(VOID_NAMESPACE)
        first = read(state, kind)
        assert first != second and first not in (None, [], {})
        assert list(backend.keys(kind, "window-1")) == ["a"]
        assert list(backend.keys(kind, "window-2")) == []
        state.set_current_namespace("window-1")
        state.clear()
        assert list(backend.keys(kind, "window-1")) == []
        assert list(backend.keys(kind)) == ["a"]

    def test_namespace_is_in_the_snapshot(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int))
        backend.set_current_key("a")
        state.update(1)
        state.set_current_namespace("w")
        state.update(2)
        rows = backend.snapshot_key_group("v", backend.current_key_group).to_pylist()
        assert sorted((r["namespace"], r["value"]) for r in rows) == [("", 1), ("w", 2)]


# -- keys and apply_to_all_keys -----------------------------------------------------------
class TestKeys:
    def test_keys_and_apply_to_all_keys(self, backend: KeyedStateBackend) -> None:
        descriptor = ValueStateDescriptor("v", int)
        state = backend.get_partitioned_state(descriptor)
        for i in range(20):
            backend.set_current_key(f"user-{i}")
            state.update(i)
        backend.set_current_key("user-3")
        assert sorted(backend.keys("v")) == sorted(f"user-{i}" for i in range(20))
        seen: dict[str, int] = {}

        def visit(key: Any, s: Any) -> None:
            seen[key] = s.value()
            if s.value() % 2:
                s.clear()
            else:
                s.update(s.value() * 10)

        backend.apply_to_all_keys(descriptor, visit)
        assert seen == {f"user-{i}": i for i in range(20)}
        assert backend.current_key == "user-3"  # restored
        assert sorted(backend.keys("v")) == sorted(f"user-{i}" for i in range(0, 20, 2))
        backend.set_current_key("user-4")
        assert state.value() == 40

    def test_apply_to_all_keys_in_a_namespace(self, backend: KeyedStateBackend) -> None:
        descriptor = ListStateDescriptor("l", int)
        state = backend.get_partitioned_state(descriptor)
        for key in ("a", "b"):
            backend.set_current_key(key)
            state.set_current_namespace("w")
            state.add(1)
        backend.set_current_key("c")
        state.set_current_namespace(VOID_NAMESPACE)
        state.add(1)
        visited: list[str] = []
        backend.apply_to_all_keys(descriptor, lambda k, s: visited.append(k), "w")
        assert sorted(visited) == ["a", "b"]


# -- snapshots and restore ----------------------------------------------------------------
def fill(
    backend: KeyedStateBackend,
    keys: list[str],
    namespaces: tuple[str, ...] = ("", "w"),
) -> None:
    for kind, descriptor in descriptors().items():
        state = backend.get_partitioned_state(descriptor)
        for i, key in enumerate(keys):
            backend.set_current_key(key)
            for j, ns in enumerate(namespaces):
                state.set_current_namespace(ns)
                write_sample(state, kind, i * 10 + j)
        state.set_current_namespace(VOID_NAMESPACE)


def contents(
    backend: KeyedStateBackend, keys: list[str], namespaces: tuple[str, ...] = ("", "w")
) -> dict[Any, Any]:
    out = {}
    for kind, descriptor in descriptors().items():
        state = backend.get_partitioned_state(descriptor)
        for key in keys:
            backend.set_current_key(key)
            for ns in namespaces:
                state.set_current_namespace(ns)
                out[kind, key, ns] = read(state, kind)
        state.set_current_namespace(VOID_NAMESPACE)
    return out


class TestSnapshots:
    @pytest.mark.parametrize("kind", KINDS)
    def test_rows_have_the_snapshot_schema(self, backend: KeyedStateBackend, kind: str) -> None:
        descriptor = descriptors()[kind]
        state = backend.get_partitioned_state(descriptor)
        expected = snapshot_schema(backend.key_type, descriptor)
        assert backend.snapshot_key_group(kind, 0).schema == expected
        assert backend.snapshot_key_group(kind, 0).num_rows == 0
        backend.set_current_key("a")
        write_sample(state, kind, 1)
        rows = backend.snapshot_key_group(kind, backend.current_key_group)
        assert rows.schema == expected
        assert rows.num_rows == (2 if kind == "map" else 1)

    def test_snapshot_rows(self, backend: KeyedStateBackend) -> None:
        fill(backend, ["a"], ("",))
        kg = assign_to_key_group("a", 128)
        rows = {kind: backend.snapshot_key_group(kind, kg).to_pylist() for kind in KINDS}
        assert rows["value"] == [{"key": "a", "namespace": "", "value": 0}]
        assert rows["list"] == [{"key": "a", "namespace": "", "value": ["e0", "f0"]}]
        assert sorted(rows["map"], key=lambda r: r["user_key"]) == [
            {"key": "a", "namespace": "", "user_key": "common", "value": 0},
            {"key": "a", "namespace": "", "user_key": "k0", "value": 0},
        ]
        assert rows["reducing"] == [{"key": "a", "namespace": "", "value": 1}]
        assert rows["aggregating"] == [
            {"key": "a", "namespace": "", "value": {"sum": 1.0, "count": 2}}
        ]

    def test_changed_key_groups(self, backend: KeyedStateBackend) -> None:
        state = backend.get_partitioned_state(ValueStateDescriptor("v", int))
        other = backend.get_partitioned_state(ValueStateDescriptor("o", int))
        assert backend.changed_key_groups("v") == set()
        backend.set_current_key("a")
        state.update(1)
        backend.set_current_key("b")
        state.update(2)
        assert backend.changed_key_groups("v") == {assign_to_key_group(k, 128) for k in "ab"}
        assert backend.changed_key_groups("o") == set()
        backend.mark_snapshotted()
        assert backend.changed_key_groups("v") == set()
        state.value()  # reads change nothing
        other.value()
        assert backend.changed_key_groups("v") == set()
        state.clear()
        assert backend.changed_key_groups("v") == {assign_to_key_group("b", 128)}

    def test_round_trip_into_a_fresh_backend(
        self, backend: KeyedStateBackend, make_backend: MakeBackend, target_backend: str
    ) -> None:
        keys = [f"user-{i}" for i in range(30)]
        fill(backend, keys)
        expected = contents(backend, keys)
        snapshots = {kind: snapshot_all(backend, kind) for kind in KINDS}
        restored = make_backend(restore_source=restore_source(snapshots), backend=target_backend)
        assert contents(restored, keys) == expected
        for kind in KINDS:
            assert restored.changed_key_groups(kind) == set()  # restoring is not a change
            assert all_rows(snapshot_all(restored, kind)) == all_rows(snapshots[kind])
            assert sorted(restored.keys(kind, "w")) == sorted(keys)

    def test_restore_splits_by_key_group(
        self, backend: KeyedStateBackend, make_backend: MakeBackend
    ) -> None:
        keys = [f"user-{i}" for i in range(40)]
        fill(backend, keys)
        snapshots = {kind: snapshot_all(backend, kind) for kind in KINDS}
        expected = contents(backend, keys)
        halves = [KeyGroupRange(0, 63), KeyGroupRange(64, 127)]
        for half in halves:
            part = make_backend(
                key_group_range=half, restore_source=restore_source(snapshots, half)
            )
            mine = [k for k in keys if assign_to_key_group(k, 128) in half]
            assert 0 < len(mine) < len(keys)
            got = contents(part, mine)
            assert got == {k: v for k, v in expected.items() if k[1] in mine}
            assert sorted(part.keys("value")) == sorted(mine)

    def test_restore_key_group_directly(
        self, backend: KeyedStateBackend, make_backend: MakeBackend
    ) -> None:
        state = backend.get_partitioned_state(MapStateDescriptor("m", str, int))
        backend.set_current_key("a")
        state.put_all({"x": 1, "y": 2})
        kg = backend.current_key_group
        rows = backend.snapshot_key_group("m", kg)
        fresh = make_backend()
        restored = fresh.get_partitioned_state(MapStateDescriptor("m", str, int))
        fresh.restore_key_group("m", kg, rows)
        fresh.set_current_key("a")
        assert dict(restored.items()) == {"x": 1, "y": 2}

    def test_pickled_values_round_trip(
        self, backend: KeyedStateBackend, make_backend: MakeBackend
    ) -> None:
        descriptor = ListStateDescriptor("objs", PICKLED)
        state = backend.get_partitioned_state(descriptor)
        backend.set_current_key("a")
        state.add_all([{1, 2}, ("t", None)])
        rows = backend.snapshot_key_group("objs", backend.current_key_group)
        assert rows.schema.field("value").type == pa.list_(pa.binary())
        restored = make_backend(
            restore_source=restore_source({"objs": {backend.current_key_group: rows}})
        )
        handle = restored.get_partitioned_state(descriptor)
        restored.set_current_key("a")
        assert handle.get() == [{1, 2}, ("t", None)]
