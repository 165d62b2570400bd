"""Schema compatibility on restore: each incompatible change is a clear error before any record
is processed; each compatible one restores the data, migrated, and rewrites the table."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.compatibility import Compatibility, check_schema, migrate_rows
from statecore.config import StatecoreConfig
from statecore.descriptors import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from statecore.errors import StateMigrationError
from statecore.query import run_sql
from statecore.runtime import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    RuntimeContext,
)
from statecore.ttl import ManualTimeProvider, StateTtlConfig
from statecore.types import TypeInfo
from tests.inprocess import run_checkpoint

KEYS = [f"user-{i}" for i in range(8)]
TTL = StateTtlConfig(ttl=timedelta(minutes=1))


class Keep(KeyedProcessFunction):
    """Registers one descriptor; each record is the value to store (or a key to read with)."""

    def __init__(self, descriptor: StateDescriptor) -> None:
        self.descriptor = descriptor

    def open(self, ctx: RuntimeContext) -> None:
        self.state: Any = ctx.backend.get_partitioned_state(self.descriptor)

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        kind = self.descriptor.kind.value
        if value is not None:
            if kind == "value":
                self.state.update(value)
            elif kind == "list":
                self.state.add_all(value)
            else:
                self.state.put_all(value)
        current = (
            self.state.value()
            if kind == "value"
            else (self.state.get() if kind == "list" else dict(self.state.items()))
        )
        yield ctx.current_key, current


def write_then_read(
    config: StatecoreConfig,
    before: StateDescriptor,
    after: StateDescriptor,
    values: list[Any],
    *,
    key_type: type = str,
    clock: ManualTimeProvider | None = None,
) -> dict[Any, Any]:
    keys = KEYS if key_type is str else list(range(len(KEYS)))
    run_checkpoint(
        config, Keep(before), list(zip(keys, values)), job="evolve", checkpoint_id=1, clock=clock
    )
    out, record = run_checkpoint(
        config,
        Keep(after),
        [(k, None) for k in keys],
        job="evolve",
        checkpoint_id=2,
        parallelism=3,
        clock=clock,
    )
    assert record.status is CheckpointStatus.COMPLETED
    again, _ = run_checkpoint(
        config,
        Keep(after),
        [(k, None) for k in keys],
        job="evolve",
        checkpoint_id=3,
        parallelism=1,
        clock=clock,
    )
    assert sorted(again, key=repr) == sorted(out, key=repr)  # the migrated table restores
    return dict(out)


POINT = pa.struct([("x", pa.int32())])
POINT_Z = pa.struct([("x", pa.int64()), pa.field("z", pa.string())])


class TestCompatibleChanges:
    def test_add_a_nullable_field_and_widen(self, statecore_home: StatecoreConfig) -> None:
        got = write_then_read(
            statecore_home,
            ValueStateDescriptor("p", POINT),
            ValueStateDescriptor("p", POINT_Z),
            [{"x": i} for i in range(8)],
        )
        assert got == {k: {"x": i, "z": None} for i, k in enumerate(KEYS)}
        with Catalog.connect(statecore_home.catalog_url) as catalog:
            types = (
                run_sql(catalog, "SELECT DISTINCT typeof(value) AS t FROM evolve.p", job="evolve")
                .column("t")
                .to_pylist()
            )
        assert types == ["STRUCT(x BIGINT, z VARCHAR)"]  # every key group rewritten

    @pytest.mark.parametrize(
        "before,after,values,expected",
        [
            (ValueStateDescriptor("v", pa.int32()), ValueStateDescriptor("v", int), [7] * 8, 7),
            (
                ValueStateDescriptor("v", pa.float32()),
                ValueStateDescriptor("v", float),
                [0.5] * 8,
                0.5,
            ),
            (
                ListStateDescriptor("v", pa.int16()),
                ListStateDescriptor("v", int),
                [[1, 2]] * 8,
                [1, 2],
            ),
            (
                MapStateDescriptor("v", str, pa.int8()),
                MapStateDescriptor("v", str, int),
                [{"a": 1}] * 8,
                {"a": 1},
            ),
        ],
        ids=["int32-int64", "float32-float64", "list-element", "map-value"],
    )
    def test_widen(
        self,
        statecore_home: StatecoreConfig,
        before: StateDescriptor,
        after: StateDescriptor,
        values: list[Any],
        expected: Any,
    ) -> None:
        got = write_then_read(statecore_home, before, after, values)
        assert got == {k: expected for k in KEYS}

    @pytest.mark.parametrize("kind", ["value", "list", "map"])
    def test_ttl_turned_on(self, statecore_home: StatecoreConfig, kind: str) -> None:
        clock = ManualTimeProvider(1_000_000)
        plain, with_ttl, values, expected = _ttl_pair(kind)
        got = write_then_read(statecore_home, plain, with_ttl, values, clock=clock)
        assert got == {k: expected for k in KEYS}
        clock.advance(TTL.ttl_ms)  # TTL started at the restore: now everything expired
        out, _ = run_checkpoint(
            statecore_home,
            Keep(with_ttl),
            [(k, None) for k in KEYS],
            job="evolve",
            checkpoint_id=4,
            clock=clock,
        )
        assert {v if v is None else len(v) if kind != "value" else v for _, v in out} <= {None, 0}

    @pytest.mark.parametrize("kind", ["value", "list", "map"])
    def test_ttl_turned_off(self, statecore_home: StatecoreConfig, kind: str) -> None:
        plain, with_ttl, values, expected = _ttl_pair(kind)
        got = write_then_read(
            statecore_home, with_ttl, plain, values, clock=ManualTimeProvider(1_000_000)
        )
        assert got == {k: expected for k in KEYS}
        with Catalog.connect(statecore_home.catalog_url) as catalog:
            columns = run_sql(catalog, "SELECT * FROM evolve.v LIMIT 1", job="evolve").column_names
        assert "ttl_timestamp" not in columns


def _ttl_pair(kind: str) -> tuple[StateDescriptor, StateDescriptor, list[Any], Any]:
    if kind == "value":
        return ValueStateDescriptor("v", int), ValueStateDescriptor("v", int, ttl=TTL), [3] * 8, 3
    if kind == "list":
        return (
            ListStateDescriptor("v", str),
            ListStateDescriptor("v", str, ttl=TTL),
            [["a", "b"]] * 8,
            ["a", "b"],
        )
    return (
        MapStateDescriptor("v", str, int),
        MapStateDescriptor("v", str, int, ttl=TTL),
        [{"a": 1}] * 8,
        {"a": 1},
    )


class Never(Keep):
    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        raise AssertionError("a record was processed despite an incompatible schema")


class TestIncompatibleChanges:
    @pytest.mark.parametrize(
        "before,after,values,message",
        [
            (
                ValueStateDescriptor("v", int),
                ValueStateDescriptor("v", pa.int32()),
                [1] * 8,
                "value narrows from int64 to int32",
            ),
            (
                ValueStateDescriptor("v", int),
                ValueStateDescriptor("v", str),
                [1] * 8,
                "value changes from int64 to string",
            ),
            (
                ValueStateDescriptor("v", float),
                ValueStateDescriptor("v", pa.float32()),
                [1.0] * 8,
                "narrows from double to float",
            ),
            (
                ValueStateDescriptor("v", POINT),
                ValueStateDescriptor("v", pa.struct([("x", pa.string())])),
                [{"x": 1}] * 8,
                r"value\.x changes from int32 to string",
            ),
            (
                ValueStateDescriptor("v", POINT),
                ValueStateDescriptor(
                    "v", pa.struct([("x", pa.int32()), pa.field("y", pa.int32(), nullable=False)])
                ),
                [{"x": 1}] * 8,
                r"value\.y is added but not nullable",
            ),
            (
                ListStateDescriptor("v", int),
                ListStateDescriptor("v", pa.int8()),
                [[1]] * 8,
                r"value\[\] narrows",
            ),
            (
                ValueStateDescriptor("v", int),
                ListStateDescriptor("v", int),
                [1] * 8,
                "kind changed from value to list",
            ),
        ],
        ids=[
            "narrow-int",
            "int-to-string",
            "narrow-float",
            "nested-type",
            "non-nullable-field",
            "narrow-list-element",
            "kind",
        ],
    )
    def test_is_a_clear_error_before_processing(
        self,
        statecore_home: StatecoreConfig,
        before: StateDescriptor,
        after: StateDescriptor,
        values: list[Any],
        message: str,
    ) -> None:
        run_checkpoint(
            statecore_home, Keep(before), list(zip(KEYS, values)), job="evolve", checkpoint_id=1
        )
        with pytest.raises(
            StateMigrationError, match=rf"job 'evolve', operator 'main', state 'v': .*{message}"
        ):
            run_checkpoint(
                statecore_home,
                Never(after),
                [(k, None) for k in KEYS],
                job="evolve",
                checkpoint_id=2,
            )
        with Catalog.connect(statecore_home.catalog_url) as catalog:
            assert catalog.get_checkpoint("evolve", 2).status is CheckpointStatus.FAILED
            assert catalog.latest_checkpoint("evolve").checkpoint_id == 1

    def test_key_type_changed(self, statecore_home: StatecoreConfig) -> None:
        run_checkpoint(
            statecore_home,
            Keep(ValueStateDescriptor("v", int)),
            list(zip(KEYS, range(8))),
            job="evolve",
            checkpoint_id=1,
        )
        with pytest.raises(
            StateMigrationError, match="state 'v': the key type changed from string to int64"
        ):
            run_checkpoint(
                statecore_home,
                Never(ValueStateDescriptor("v", int)),
                [(i, None) for i in range(8)],
                job="evolve",
                checkpoint_id=2,
                key_type=TypeInfo.of(int),
            )

    def test_operator_state_mode_changed(self, statecore_home: StatecoreConfig) -> None:
        run_checkpoint(
            statecore_home, WithOffsets(union=False), [("a", None)], job="evolve", checkpoint_id=1
        )
        with pytest.raises(
            StateMigrationError,
            match="state 'offsets': the state kind changed from operator_list to union_list",
        ):
            run_checkpoint(
                statecore_home,
                WithOffsets(union=True),
                [("a", None)],
                job="evolve",
                checkpoint_id=2,
            )


class WithOffsets(KeyedProcessFunction, CheckpointedFunction):
    def __init__(self, union: bool) -> None:
        self.union = union

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        store = context.operator_state_store
        descriptor = ListStateDescriptor("offsets", int)
        self.offsets = (
            store.get_union_list_state(descriptor)
            if self.union
            else store.get_list_state(descriptor)
        )

    def process_element(self, value: Any, ctx: Context) -> None:
        return None

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        self.offsets.update([context.checkpoint_id])


class TestRules:
    def test_as_is(self) -> None:
        schema = pa.schema([("key", pa.string()), ("value", pa.int64())])
        assert check_schema(schema, schema).compatibility is Compatibility.COMPATIBLE_AS_IS

    def test_field_dropped_and_reordered(self) -> None:
        old = pa.schema([("value", pa.struct([("a", pa.int64()), ("b", pa.string())]))])
        new = pa.schema([("value", pa.struct([("b", pa.string())]))])
        assert check_schema(old, new).reason == "value.a is dropped"
        rows = pa.Table.from_pylist([{"value": {"a": 1, "b": "x"}}, {"value": None}], schema=old)
        assert migrate_rows(rows, new).to_pylist() == [{"value": {"b": "x"}}, {"value": None}]

    def test_unsigned_widening(self) -> None:
        def check(old: pa.DataType, new: pa.DataType) -> Compatibility:
            return check_schema(
                pa.schema([("value", old)]), pa.schema([("value", new)])
            ).compatibility

        assert check(pa.uint8(), pa.int16()) is Compatibility.COMPATIBLE_AFTER_MIGRATION
        assert check(pa.uint8(), pa.uint32()) is Compatibility.COMPATIBLE_AFTER_MIGRATION
        assert check(pa.int8(), pa.uint16()) is Compatibility.INCOMPATIBLE
        assert check(pa.int32(), pa.float64()) is Compatibility.INCOMPATIBLE

    def test_migrates_sliced_nested_rows(self) -> None:
        old = pa.schema([("value", pa.list_(pa.struct([("a", pa.int8())])))])
        new = pa.schema([("value", pa.list_(pa.struct([("a", pa.int64()), ("b", pa.bool_())])))])
        rows = pa.Table.from_pylist(
            [{"value": [{"a": 1}]}, {"value": [{"a": 2}, {"a": 3}]}], schema=old
        ).slice(1)
        assert migrate_rows(rows, new).to_pylist() == [
            {"value": [{"a": 2, "b": None}, {"a": 3, "b": None}]}
        ]
