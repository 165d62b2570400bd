"""``KeyContext``: the one current key a backend, its states and its timers share."""

from __future__ import annotations

import pytest

from statecore.backends import KeyContext, KeyedStateBackend
from statecore.descriptors import ListStateDescriptor, ValueStateDescriptor
from statecore.errors import StateAccessError
from statecore.keygroups import assign_to_key_group


def test_save_restore_clear() -> None:
    context = KeyContext()
    assert (context.key, context.key_group, context.prefix) == (None, None, b"")
    context.key, context.key_group, context.prefix = "a", 3, b"\x00\x03a"
    saved = context.save()
    context.key, context.key_group, context.prefix = "b", 4, b"\x00\x04b"
    context.restore(saved)
    assert (context.key, context.key_group, context.prefix) == ("a", 3, b"\x00\x03a")
    context.clear()
    assert context.key_group is None and context.prefix == b""
    assert repr(context) == "KeyContext(key=None, key_group=None)"


def test_set_current_key_fills_the_backends_context(backend: KeyedStateBackend) -> None:
    context = backend.key_context
    assert context.key_group is None
    backend.set_current_key("user-1")
    assert (context.key, context.key_group) == ("user-1", assign_to_key_group("user-1", 128))
    assert backend.key_context is context  # one object for the backend's lifetime


def test_states_and_timers_read_the_context(backend: KeyedStateBackend) -> None:
    """What the task's per-record loop relies on: a state reads whatever key the context holds
    (the heap task assigns key and key group without calling the backend)."""
    values = backend.get_partitioned_state(ValueStateDescriptor("v", int))
    lists = backend.get_partitioned_state(ListStateDescriptor("l", str))
    for key in ("a", "b"):
        backend.set_current_key(key)
        values.update(ord(key))
        lists.add(key)
        backend.timer_service.register_event_time_timer(10)
    saved = backend.key_context.save()  # key "b"
    backend.set_current_key("a")
    assert values.value() == ord("a")
    backend.key_context.restore(saved)
    assert values.value() == ord("b") and lists.get() == ["b"]
    backend.key_context.clear()
    with pytest.raises(StateAccessError, match="outside a keyed context"):
        values.value()
    with pytest.raises(StateAccessError, match="no current key"):
        backend.timer_service.register_event_time_timer(20)
    fired = [(t.key, t.timestamp) for t in backend.timer_service.advance_watermark(10)]
    assert sorted(fired) == [("a", 10), ("b", 10)]


def test_a_checked_batch_makes_its_keys_current_as_set_current_key_does(
    backend: KeyedStateBackend,
) -> None:
    """The backend checks a batch's key groups once; its batch key-setter then makes each key
    current exactly as ``set_current_key`` would (RocksDB's key prefix included)."""
    import pyarrow as pa

    from statecore.errors import KeyGroupOutOfRangeError

    keys = ["a", "b", "c"]
    groups = [assign_to_key_group(k, 128) for k in keys]
    backend.check_key_groups(pa.array(groups, pa.int32()), keys)
    context, listeners = backend.batch_key_setter()
    assert context is backend.key_context
    for key, key_group in zip(keys, groups, strict=True):
        context.key, context.key_group = key, key_group
        for listener in listeners:
            listener()
        made = backend.key_context.save()
        backend.set_current_key(key)
        assert made == backend.key_context.save()
    with pytest.raises(KeyGroupOutOfRangeError, match="key 'z' is in key group 200"):
        backend.check_key_groups(pa.array([3, 200], pa.int32()), ["a", "z"])


def test_a_batch_key_of_the_wrong_type_leaves_no_key_current_on_rocksdb() -> None:
    """RocksDB encodes the prefix in the batch setter's first listener: a key of the wrong
    type fails there with the backend's error, and no half-set key stays current."""
    from statecore.backends.rocksdb import RocksDBKeyedStateBackend
    from statecore.errors import KeyTypeError
    from statecore.keygroups import KeyGroupRange
    from statecore.types import TypeInfo

    rocks = RocksDBKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
    )
    try:
        context, listeners = rocks.batch_key_setter()
        context.key, context.key_group = 7, assign_to_key_group(7, 128)
        with pytest.raises(KeyTypeError):
            for listener in listeners:
                listener()
        assert context.key_group is None
        with pytest.raises(StateAccessError):
            rocks.get_partitioned_state(ValueStateDescriptor("v", int)).value()
    finally:
        rocks.close()
