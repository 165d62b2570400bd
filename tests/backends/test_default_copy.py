"""A read of an unset key returns a fresh copy of a mutable default, as Flink copies the default
through its serializer on every read: the usual ``acc = s.value(); acc.append(x); s.update(acc)``
must change nothing for any other key, nor the descriptor's default. On every backend, with TTL
off and on; the vectorized and Spark paths are in ``tests/spark/test_default_copy_spark.py``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import KeyedStateBackend
from statecore.descriptors import ValueStateDescriptor
from statecore.ttl import StateTtlConfig

from .contract import all_rows, snapshot_all

INTS = pa.list_(pa.int64())
POINT = pa.struct([("x", pa.int64()), ("tags", pa.list_(pa.string()))])
TTL = StateTtlConfig(ttl=timedelta(hours=1))


@pytest.fixture(params=[None, TTL], ids=["no_ttl", "ttl"])
def ttl(request: pytest.FixtureRequest) -> StateTtlConfig | None:
    return request.param  # type: ignore[no-any-return]


def append(state: Any, x: int) -> None:
    acc = state.value()
    acc.append(x)
    state.update(acc)


def test_default_copy_list_default_is_not_shared_between_keys(
    backend: KeyedStateBackend, ttl: StateTtlConfig | None
) -> None:
    descriptor = ValueStateDescriptor("seen", INTS, default=[], ttl=ttl)
    state = backend.get_partitioned_state(descriptor)
    backend.set_current_key("a")
    append(state, 1)
    backend.set_current_key("b")
    assert state.value() == []  # not [1]
    append(state, 99)
    backend.set_current_key("a")
    assert state.value() == [1]  # not [1, 99]
    backend.set_current_key("c")
    assert state.value() == []
    assert descriptor.default == []


def test_default_copy_mutating_a_read_without_update_changes_nothing(
    backend: KeyedStateBackend, ttl: StateTtlConfig | None
) -> None:
    state = backend.get_partitioned_state(ValueStateDescriptor("seen", INTS, default=[], ttl=ttl))
    backend.set_current_key("a")
    state.value().append(7)
    assert state.value() == []
    assert list(backend.keys("seen")) == []


def test_default_copy_nested_struct_default(
    backend: KeyedStateBackend, ttl: StateTtlConfig | None
) -> None:
    default = {"x": 0, "tags": []}
    state = backend.get_partitioned_state(
        ValueStateDescriptor("point", POINT, default=default, ttl=ttl)
    )
    backend.set_current_key("a")
    point = state.value()
    point["tags"].append("first")
    point["x"] = 1
    state.update(point)
    backend.set_current_key("b")
    assert state.value() == {"x": 0, "tags": []}
    assert default == {"x": 0, "tags": []}


def test_default_copy_checkpoint_holds_each_keys_own_value(
    backend: KeyedStateBackend, ttl: StateTtlConfig | None
) -> None:
    state = backend.get_partitioned_state(ValueStateDescriptor("seen", INTS, default=[], ttl=ttl))
    for key, x in [("a", 1), ("b", 99), ("a", 2)]:
        backend.set_current_key(key)
        append(state, x)
    rows = all_rows(snapshot_all(backend, "seen"))
    values = {r["key"]: r["value"] for r in rows}
    assert values == {"a": [1, 2], "b": [99]}


def test_default_copy_immutable_default_is_returned_as_is(backend: KeyedStateBackend) -> None:
    """No copy (and no cost) for defaults that cannot be mutated."""
    descriptor = ValueStateDescriptor("name", str, default="anonymous")
    assert descriptor.default_factory is None
    state = backend.get_partitioned_state(descriptor)
    backend.set_current_key("a")
    assert state.value() is descriptor.default
