"""Operator state: the store's three modes, and redistribution as Flink's round-robin
repartitioner computes it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statecore.backends.operator import OperatorStateMode, OperatorStateStore, repartition
from statecore.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statecore.errors import (
    ConfigError,
    StateAccessError,
    StateDescriptorConflictError,
    StateMigrationError,
)
from statecore.ttl import StateTtlConfig
from statecore.types import PICKLED

SPLIT = OperatorStateMode.SPLIT_DISTRIBUTE
UNION = OperatorStateMode.UNION
BROADCAST = OperatorStateMode.BROADCAST


def counts(parts: list[dict[str, list[int]]], name: str) -> list[int]:
    return [len(p[name]) for p in parts]


class TestRepartition:
    def test_split_1_3_2(self) -> None:
        at3 = repartition({"s": (SPLIT, [list(range(10))])}, 1, 3)
        assert [p["s"] for p in at3] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
        at2 = repartition({"s": (SPLIT, [p["s"] for p in at3])}, 3, 2)
        assert [p["s"] for p in at2] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]

    def test_next_split_state_starts_after_the_remainder(self) -> None:
        parts = repartition(
            {
                "a": (SPLIT, [list(range(10))]),
                "b": (SPLIT, [list(range(7))]),
                "c": (SPLIT, [list(range(5))]),
            },
            1,
            3,
        )
        assert counts(parts, "a") == [4, 3, 3]
        assert counts(parts, "b") == [2, 3, 2]  # starts at subtask 1, which takes the extra
        assert counts(parts, "c") == [2, 1, 2]  # starts at subtask 2, two extras: 2, then 0
        assert parts[1]["b"] == [0, 1, 2] and parts[2]["c"] == [0, 1]

    def test_fewer_elements_than_subtasks(self) -> None:
        assert counts(repartition({"s": (SPLIT, [[1, 2]])}, 1, 4), "s") == [1, 1, 0, 0]
        assert counts(repartition({"s": (SPLIT, [[], []])}, 2, 3), "s") == [0, 0, 0]

    def test_same_parallelism_keeps_split_and_broadcast_in_place(self) -> None:
        parts = repartition(
            {
                "s": (SPLIT, [[1, 2, 3], [], [4]]),
                "b": (BROADCAST, [[("k", 1)], [("k", 2)], []]),
                "u": (UNION, [["x"], ["y"], []]),
            },
            3,
            3,
        )
        assert [p["s"] for p in parts] == [[1, 2, 3], [], [4]]
        assert [p["b"] for p in parts] == [[("k", 1)], [("k", 2)], []]
        assert [p["u"] for p in parts] == [["x", "y"]] * 3

    def test_union_goes_everywhere_in_subtask_order(self) -> None:
        parts = repartition({"u": (UNION, [["a"], ["b", "c"], []])}, 3, 2)
        assert [p["u"] for p in parts] == [["a", "b", "c"], ["a", "b", "c"]]

    def test_broadcast_takes_subtask_i_mod_old_parallelism(self) -> None:
        parts = repartition({"b": (BROADCAST, [[("k", 0)], [("k", 1)], [("k", 2)]])}, 3, 5)
        assert [p["b"] for p in parts] == [[("k", i % 3)] for i in range(5)]


class TestStore:
    def test_list_union_and_broadcast(self) -> None:
        store = OperatorStateStore()
        offsets = store.get_list_state(ListStateDescriptor("offsets", int))
        everyone = store.get_union_list_state(ListStateDescriptor("everyone", str))
        rules = store.get_broadcast_state(MapStateDescriptor("rules", str, float))
        offsets.add(1)
        offsets.add_all([2, 3])
        everyone.update(["a"])
        rules["limit"] = 2.5
        rules.put_all({"floor": 0.5, "none": None})
        assert offsets.get() == [1, 2, 3] and everyone.get() == ["a"]
        assert dict(rules.items()) == {"limit": 2.5, "floor": 0.5, "none": None}
        assert len(rules) == 3 and "limit" in rules and rules.get("nope") is None
        rules.remove("none")
        assert store.state_names == ["everyone", "offsets", "rules"]
        assert store.mode("everyone") is UNION
        assert store.snapshot("offsets").to_pylist() == [
            {"mode": "split_distribute", "value": v} for v in (1, 2, 3)
        ]
        assert sorted(store.snapshot("rules").to_pylist(), key=lambda r: r["user_key"]) == [
            {"mode": "broadcast", "user_key": "floor", "value": 0.5},
            {"mode": "broadcast", "user_key": "limit", "value": 2.5},
        ]
        offsets.clear()
        assert offsets.get() == [] and store.snapshot("offsets").num_rows == 0

    def test_one_handle_per_name_and_conflicts(self) -> None:
        store = OperatorStateStore()
        first = store.get_list_state(ListStateDescriptor("s", int))
        assert store.get_list_state(ListStateDescriptor("s", int)) is first
        with pytest.raises(StateDescriptorConflictError, match="split_distribute.*union"):
            store.get_union_list_state(ListStateDescriptor("s", int))
        with pytest.raises(StateDescriptorConflictError):
            store.get_list_state(ListStateDescriptor("s", str))
        with pytest.raises(ConfigError):
            store.get_list_state(ValueStateDescriptor("v", int))  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="TTL"):
            store.get_list_state(
                ListStateDescriptor(
                    "t", int, ttl=StateTtlConfig(ttl=__import__("datetime").timedelta(1))
                )
            )

    def test_bad_values(self) -> None:
        store = OperatorStateStore()
        state = store.get_list_state(ListStateDescriptor("s", int))
        with pytest.raises(StateAccessError):
            state.add(None)
        with pytest.raises(StateAccessError):
            state.add("1")
        with pytest.raises(StateAccessError):
            state.set_current_namespace("w")
        rules = store.get_broadcast_state(MapStateDescriptor("r", str, int))
        with pytest.raises(StateAccessError):
            rules.put("k", "v")

    def test_restore_and_mode_check(self) -> None:
        source = OperatorStateStore()
        source.get_list_state(ListStateDescriptor("objs", PICKLED)).add_all([{1}, ("t",)])
        rows = source.snapshot("objs")
        assert rows.schema.field("value").type == pa.binary()
        restored = OperatorStateStore(restored={"objs": rows})
        assert restored.get_list_state(ListStateDescriptor("objs", PICKLED)).get() == [{1}, ("t",)]
        again = OperatorStateStore(restored={"objs": rows})
        with pytest.raises(StateMigrationError, match="mode"):
            again.get_union_list_state(ListStateDescriptor("objs", PICKLED))

    def test_restore_migrates_a_widened_type(self) -> None:
        source = OperatorStateStore()
        source.get_list_state(ListStateDescriptor("n", pa.int32())).add_all([1, 2])
        restored = OperatorStateStore(restored={"n": source.snapshot("n")})
        assert restored.get_list_state(ListStateDescriptor("n", int)).get() == [1, 2]
        assert restored.snapshot("n").schema.field("value").type == pa.int64()
