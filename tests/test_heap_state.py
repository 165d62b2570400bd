"""The heap backend's common state methods (the full contract suite lives in tests/backends)."""

from __future__ import annotations


import pytest

from statecore.backends import HeapKeyedStateBackend
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
from statecore.types import TypeInfo
from tests.backends.contract import MEAN_TYPE, Mean


def backend(kg_range: KeyGroupRange = KeyGroupRange(0, 127)) -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend(key_type=TypeInfo.of(str), key_group_range=kg_range,
                                 max_parallelism=128)


def test_all_five_kinds_per_key() -> None:
    b = backend()
    value = b.get_partitioned_state(ValueStateDescriptor("total", int, default=0))
    lst = b.get_partitioned_state(ListStateDescriptor("events", str))
    mp = b.get_partitioned_state(MapStateDescriptor("counts", str, int))
    red = b.get_partitioned_state(ReducingStateDescriptor("max", max, float))
    agg = b.get_partitioned_state(AggregatingStateDescriptor("mean", Mean(), MEAN_TYPE))
    for key, amounts in {"a": [1.0, 5.0], "b": [2.0]}.items():
        b.set_current_key(key)
        for x in amounts:
            value.update(value.value() + int(x))  # type: ignore[attr-defined]
            lst.add(f"e{x}")  # type: ignore[attr-defined]
            mp.put("click", (mp.get("click") or 0) + 1)  # type: ignore[attr-defined]
            red.add(x)  # type: ignore[attr-defined]
            agg.add(x)  # type: ignore[attr-defined]
    b.set_current_key("a")
    assert value.value() == 6  # type: ignore[attr-defined]
    assert lst.get() == ["e1.0", "e5.0"]  # type: ignore[attr-defined]
    assert dict(mp.items()) == {"click": 2}  # type: ignore[attr-defined]
    assert red.get() == 5.0 and agg.get() == 3.0  # type: ignore[attr-defined]
    b.set_current_key("b")
    assert value.value() == 2 and agg.get() == 2.0  # type: ignore[attr-defined]
    b.set_current_key("c")
    assert value.value() == 0 and lst.get() == [] and red.get() is None  # type: ignore[attr-defined]
    assert agg.get() is None and mp.is_empty()  # type: ignore[attr-defined]
    value.update(7)  # type: ignore[attr-defined]
    value.update(None)  # type: ignore[attr-defined]   # None clears, as in Flink
    assert value.value() == 0  # type: ignore[attr-defined]
    assert sorted(b.keys("total")) == ["a", "b"]


def test_snapshot_and_restore_per_key_group() -> None:
    b = backend()
    counts = b.get_partitioned_state(MapStateDescriptor("counts", str, int))
    for i in range(50):
        b.set_current_key(f"user-{i}")
        counts.put("x", i)  # type: ignore[attr-defined]
        counts.put("y", -i)  # type: ignore[attr-defined]
    changed = b.changed_key_groups("counts")
    assert changed == {assign_to_key_group(f"user-{i}", 128) for i in range(50)}
    tables = {kg: b.snapshot_key_group("counts", kg) for kg in changed}
    assert sum(t.num_rows for t in tables.values()) == 100
    b.mark_snapshotted()
    assert b.changed_key_groups("counts") == set()

    restored = HeapKeyedStateBackend(
        key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 127), max_parallelism=128,
        restore_source=lambda d: tables.items())
    state = restored.get_partitioned_state(MapStateDescriptor("counts", str, int))
    restored.set_current_key("user-7")
    assert dict(state.items()) == {"x": 7, "y": -7}  # type: ignore[attr-defined]


def test_bad_use_gives_clear_errors() -> None:
    b = backend()
    total = b.get_partitioned_state(ValueStateDescriptor("total", int))
    with pytest.raises(StateAccessError, match="outside a keyed context"):
        total.value()  # type: ignore[attr-defined]
    b.set_current_key("a")
    with pytest.raises(StateAccessError, match="does not match the declared type int64"):
        total.update("not a number")  # type: ignore[attr-defined]
    with pytest.raises(StateDescriptorConflictError, match="total"):
        b.get_partitioned_state(ListStateDescriptor("total", int))
    with pytest.raises(UnknownStateError, match="nope"):
        list(b.keys("nope"))
    narrow = backend(KeyGroupRange(0, 0))
    key = next(f"k{i}" for i in range(1000) if assign_to_key_group(f"k{i}", 128) != 0)
    with pytest.raises(KeyGroupOutOfRangeError, match="outside this backend's key groups 0..0"):
        narrow.set_current_key(key)
