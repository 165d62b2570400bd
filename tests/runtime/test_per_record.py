"""The per-record fast path of ``KeyedOperatorTask.process_batch`` (issue 43): key groups
checked once per batch, RocksDB's key prefixes built once per batch as a column. It must give the
reference model's results on both backends, across batch boundaries, runs of equal keys, empty
batches, timers, TTL and late records, keep every key's bytes (and so its key group, snapshots
and rescales) identical to the per-key path, and refuse bad input before any record of the batch
changes state."""

from __future__ import annotations

import random
from collections import namedtuple
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import BackendParameters, KeyedStateBackend, create_backend
from statecore.backends.rocksdb.keys import KeyLayout
from statecore.backends.scope import TaskScope
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import KeyGroupOutOfRangeError, KeyTypeError
from statecore.keygroups import KeyGroupRange, assign_to_key_group, assign_to_key_groups
from statecore.runtime import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from statecore.runtime.lateness import EventTimeGate
from statecore.runtime.task import KeyedOperatorTask
from statecore.ttl import ManualTimeProvider, StateTtlConfig
from statecore.types import TypeInfo
from statecore.vectorized import RunningAggregate
from tests.reference_model.model import KeyedModel, Kind, ModelTtl

BACKENDS = ["heap", "rocksdb"]
Record = namedtuple("Record", ["key", "value"])
MAX_P = 128
KG = "__kg"
TOTAL = ValueStateDescriptor("total", int, default=0)
TTL_MS = 100
EXPIRING = ValueStateDescriptor(
    "total", int, default=0, ttl=StateTtlConfig(ttl=timedelta(milliseconds=TTL_MS))
)


class RunningSum(KeyedProcessFunction):
    def __init__(self, descriptor: ValueStateDescriptor = TOTAL) -> None:
        self.descriptor = descriptor

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(self.descriptor)

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        total = self.total.value() + value.value
        self.total.update(total)
        yield ctx.current_key, value.value, total


class Alarm(RunningSum):
    """The running sum, and an event-time timer 10 ms after each record emitting the total."""

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        yield from super().process_element(value, ctx)
        assert ctx.timestamp is not None
        ctx.timer_service.register_event_time_timer(ctx.timestamp + 10)

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[Any, ...]]:
        yield ctx.current_key, "timer", timestamp, self.total.value()


def backend_of(
    name: str,
    home: Path,
    *,
    key_groups: KeyGroupRange = KeyGroupRange(0, MAX_P - 1),
    clock: ManualTimeProvider | None = None,
) -> KeyedStateBackend:
    scope = TaskScope(job="j", operator="main", subtask_index=0, checkpoint_id=1, home=str(home))
    return create_backend(
        BackendParameters.of(name),
        key_type=TypeInfo.of(str),
        key_group_range=key_groups,
        max_parallelism=MAX_P,
        ttl_time_provider=clock,
        scope=scope,
    )


def task_of(
    name: str, home: Path, function: KeyedProcessFunction | None = None, **kwargs: Any
) -> KeyedOperatorTask:
    task = KeyedOperatorTask(
        function or RunningSum(),
        backend_of(name, home, **kwargs),
        job="j",
        operator="main",
        subtask_index=0,
        parallelism=1,
    )
    task.open()
    return task


def batch_of(keys: list[Any], values: list[int], **extra: list[Any]) -> pa.RecordBatch:
    """Keys and values with their key groups computed for the whole column, as Spark does."""
    key_column = pa.array(keys, pa.string())
    groups = pa.array(
        [None if k is None else assign_to_key_group(k, MAX_P) for k in keys], pa.int32()
    )
    columns = {"key": key_column, "value": pa.array(values, pa.int64()), KG: groups}
    columns.update({name: pa.array(column, pa.int64()) for name, column in extra.items()})
    return pa.record_batch(columns)


def model_sums(
    events: list[tuple[str, int]], model: KeyedModel | None = None
) -> tuple[list[tuple[str, int, int]], KeyedModel]:
    """The reference model's outputs of the running sum (in ``model``, by default a new one
    without TTL), and the model."""
    model = model or KeyedModel({"total": Kind("value", default=0)}, None, 1, MAX_P)
    out = []
    for key, value in events:
        model.key = key
        total = model.value("total") + value
        model.update("total", total)
        out.append((key, value, total))
    return out, model


def model_value(model: KeyedModel, key: str) -> Any:
    model.key = key
    return model.value("total")


def stored(task: KeyedOperatorTask, keys: set[str], name: str = "total") -> dict[str, Any]:
    """Every key's value read back through the per-key path (``set_current_key`` without a
    key group: the backend computes it and, on RocksDB, encodes the key itself)."""
    backend = task.backend
    state = backend.get_partitioned_state(task.backend.descriptors[name])
    out = {}
    for key in sorted(keys):
        backend.set_current_key(key)
        out[key] = state.value()  # type: ignore[attr-defined]
    return out


def random_events(n: int, keys: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    alphabet = ["k", "ü", "€", "𝄞", "-", "7"]
    names = ["".join(rng.choices(alphabet, k=rng.randrange(0, 9))) for _ in range(keys)]
    return [(rng.choice(names), rng.randrange(-50, 50)) for _ in range(n)]


def run_batches(task: KeyedOperatorTask, events: list[tuple[str, int]], size: int) -> list[Any]:
    out: list[Any] = []
    for start in range(0, len(events), size):
        chunk = events[start : start + size]
        batch = batch_of([k for k, _ in chunk], [v for _, v in chunk])
        out += task.process_batch(batch, key="key", key_group=KG)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_record_batches_give_the_reference_models_sums(backend: str, tmp_path: Path) -> None:
    events = random_events(3_000, 150, seed=43)
    expected, model = model_sums(events)
    task = task_of(backend, tmp_path)
    assert run_batches(task, events, size=128) == expected  # batch boundaries cut key runs
    keys = {k for k, _ in events}
    assert stored(task, keys) == {k: model_value(model, k) for k in keys}
    assert task.records == len(events)
    task.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_record_runs_of_equal_keys_and_empty_batches(backend: str, tmp_path: Path) -> None:
    runs = [("a", 1)] * 5 + [("b", 2)] * 3 + [("a", 3)] * 4 + [("", 7)] * 2 + [("b", -1)]
    expected, _ = model_sums(runs)
    task = task_of(backend, tmp_path)
    empty = batch_of([], [])
    out = task.process_batch(empty, key="key", key_group=KG)
    out += run_batches(task, runs[:6], size=6)
    out += task.process_batch(empty, key="key", key_group=KG)
    out += run_batches(task, runs[6:], size=4)
    assert out == expected
    assert stored(task, {"a", "b", ""}) == {"a": 17, "b": 5, "": 14}
    assert task.records == len(runs)
    task.close()


def test_per_record_both_backends_and_the_per_key_path_agree(tmp_path: Path) -> None:
    """The batch path on RocksDB (prefixes per batch), on the heap, and the per-key path
    (``process``: each key's group computed and its prefix encoded per record) give the same
    outputs and state."""
    events = random_events(2_000, 300, seed=7)
    rocks = task_of("rocksdb", tmp_path / "batch")
    heap = task_of("heap", tmp_path / "heap")
    per_key = task_of("rocksdb", tmp_path / "per-key")
    batched = run_batches(rocks, events, size=97)
    assert batched == run_batches(heap, events, size=97)
    records = [(k, None, Record(k, v)) for k, v in events]
    assert per_key.process(records) == [(k, v, t) for k, v, t in batched]
    keys = {k for k, _ in events}
    assert stored(rocks, keys) == stored(heap, keys) == stored(per_key, keys)
    for task in (rocks, heap, per_key):
        task.close()


def test_per_record_prefixes_are_bit_identical_to_the_per_key_encoding() -> None:
    rng = random.Random(1)
    alphabet = "aZ09-_ üß€𝄞\x00"
    keys = ["", "x" * 127, "€" * 42] + [
        "".join(rng.choices(alphabet, k=rng.randrange(0, 30))) for _ in range(2_000)
    ]
    groups = [rng.randrange(0, 1 << 15) for _ in keys]
    groups[:3] = [0, (1 << 15) - 1, 255]
    layout = KeyLayout(pa.string())
    encode = layout.prefix_function()
    built = layout.prefixes(pa.array(keys, pa.string()), pa.array(groups, pa.int32()))
    assert built == [encode(k, g) for k, g in zip(keys, groups, strict=True)]
    sliced = layout.prefixes(pa.array(keys, pa.string())[5:9], pa.array(groups, pa.int32())[5:9])
    assert sliced == [encode(k, g) for k, g in zip(keys[5:9], groups[5:9], strict=True)]


def test_per_record_prefixes_fall_back_where_a_column_cannot_hold_them() -> None:
    """Keys of 128 bytes or more (a longer length), nulls, other key types and empty
    batches: no prefixes, the loop encodes each key itself."""
    layout = KeyLayout(pa.string())
    groups = pa.array([1, 2], pa.int32())
    assert layout.prefixes(pa.array(["a", "x" * 128]), groups) is None
    assert layout.prefixes(pa.array(["a", None]), groups) is None
    assert layout.prefixes(pa.array(["a", "b"]), pa.array([1, None], pa.int32())) is None
    assert layout.prefixes(pa.array(["a", "b"], pa.large_string()), groups) is None
    assert layout.prefixes(pa.array([], pa.string()), pa.array([], pa.int32())) is None
    assert KeyLayout(pa.int64()).prefixes(pa.array([1, 2]), groups) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_record_key_groups_are_bit_identical_across_batches(
    backend: str, tmp_path: Path
) -> None:
    """The vectorized assignment Spark's key groups are checked against, the per-key one, and
    the key groups the state lands in are the same, whichever batch a key comes in."""
    events = random_events(1_500, 400, seed=11)
    keys = sorted({k for k, _ in events})
    vectorized = assign_to_key_groups(pa.array(keys, pa.string()), MAX_P).tolist()
    assert vectorized == [assign_to_key_group(k, MAX_P) for k in keys]
    task = task_of(backend, tmp_path)
    run_batches(task, events, size=64)
    assert task.backend.changed_key_groups("total") == set(vectorized)
    assert sorted(task.backend.keys("total")) == keys
    task.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_record_timers_fire_as_the_watermark_moves(backend: str, tmp_path: Path) -> None:
    task = task_of(backend, tmp_path, Alarm())
    batch = batch_of(["a", "b", "a", "c"], [1, 2, 3, 4], ts=[100, 105, 111, 130])
    out = task.process_batch(batch, key="key", key_group=KG, event_time="ts", lateness_ms=0)
    # after each record raising the largest event time, the watermark moves to it minus 1 ms
    assert out == [
        ("a", 1, 1),
        ("b", 2, 2),
        ("a", 3, 4),
        ("a", "timer", 110, 4),  # the watermark moved to 110 after the record at 111
        ("c", 4, 4),
        ("b", "timer", 115, 2),  # to 129 after the record at 130
        ("a", "timer", 121, 4),
    ]
    assert task.advance_watermark(200) == [("c", "timer", 140, 4)]
    task.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_record_ttl_expires_as_in_the_reference_model(backend: str, tmp_path: Path) -> None:
    clock = ManualTimeProvider(0)
    task = task_of(backend, tmp_path, RunningSum(EXPIRING), clock=clock)
    model = KeyedModel(
        {"total": Kind("value", default=0)},
        ModelTtl(ttl_ms=TTL_MS, update_on_read=False, return_expired=False),
        1,
        MAX_P,
    )
    rng = random.Random(5)
    for step in range(12):
        events = [(rng.choice("abcd"), rng.randrange(1, 9)) for _ in range(rng.randrange(0, 7))]
        expected, _ = model_sums(events, model)
        batch = batch_of([k for k, _ in events], [v for _, v in events])
        assert task.process_batch(batch, key="key", key_group=KG) == expected, step
        advance = rng.choice([10, 60, 150])
        clock.advance(advance)
        model.now += advance
    task.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_record_late_records_are_kept_from_state(backend: str, tmp_path: Path) -> None:
    late: list[pa.RecordBatch] = []
    gate = EventTimeGate("ts", watermark=50, on_late=late.append)
    task = task_of(backend, tmp_path)
    batches = [
        batch_of(["a", "b", "a"], [1, 2, 3], ts=[60, 40, 70]),
        batch_of(["b", "a"], [5, 6], ts=[50, 80]),
    ]
    out: list[Any] = []
    for batch in gate.on_time(batches):
        out += task.process_batch(batch, key="key", key_group=KG, event_time="ts")
    assert out == [("a", 1, 1), ("a", 3, 4), ("a", 6, 10)]
    assert [b.column("key").to_pylist() for b in late] == [["b"], ["b"]]
    assert stored(task, {"a", "b"}) == {"a": 10, "b": 0}
    task.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_record_null_key_is_refused_before_the_batch_changes_state(
    backend: str, tmp_path: Path
) -> None:
    task = task_of(backend, tmp_path)
    assert task.process_batch(batch_of(["a"], [1]), key="key", key_group=KG) == [("a", 1, 1)]
    with pytest.raises(KeyTypeError, match=r"key column 'key' holds 1 null key\(s\)"):
        task.process_batch(batch_of(["a", None, "b"], [5, 6, 7]), key="key", key_group=KG)
    assert stored(task, {"a", "b"}) == {"a": 1, "b": 0}  # nothing of the bad batch
    assert task.records == 1
    task.close()


def test_per_record_key_of_the_wrong_type_is_a_clear_error_on_rocksdb(tmp_path: Path) -> None:
    """An integer key column for string keys: no prefix column, and the per-record encoder
    names the key and the key type."""
    task = task_of("rocksdb", tmp_path)
    batch = pa.record_batch(
        {
            "key": pa.array([3], pa.int64()),
            "value": pa.array([1], pa.int64()),
            KG: pa.array([assign_to_key_group(3, MAX_P)], pa.int32()),
        }
    )
    with pytest.raises(KeyTypeError, match="key 3 of type int does not match .* string"):
        task.process_batch(batch, key="key", key_group=KG)
    assert list(task.backend.keys("total")) == []
    task.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_record_key_group_outside_the_task_is_refused_before_any_record(
    backend: str, tmp_path: Path
) -> None:
    task = task_of(backend, tmp_path, key_groups=KeyGroupRange(0, 63))
    mine = next(k for k in (f"k{i}" for i in range(1000)) if assign_to_key_group(k, MAX_P) < 64)
    other = next(k for k in (f"k{i}" for i in range(1000)) if assign_to_key_group(k, MAX_P) > 63)
    with pytest.raises(KeyGroupOutOfRangeError, match=f"key '{other}' is in key group"):
        task.process_batch(batch_of([mine, other], [1, 2]), key="key", key_group=KG)
    assert list(task.backend.keys("total")) == []
    task.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_record_and_vectorized_paths_agree(backend: str, tmp_path: Path) -> None:
    """``RunningAggregate`` (each distinct key made current once per pass, RocksDB's prefixes
    built once per batch) gives the per-record running sums and leaves the same state; the
    key current before the batch is current again after it."""
    events = random_events(2_000, 200, seed=3)
    expected, _ = model_sums(events)
    task = task_of(backend, tmp_path, RunningAggregate("value", TOTAL, output="new_sum"))
    task.backend.set_current_key("outside")
    sums: list[int] = []
    for start in range(0, len(events), 500):
        chunk = events[start : start + 500]
        table = pa.Table.from_batches([batch_of([k for k, _ in chunk], [v for _, v in chunk])])
        out = task.process_keyed_table(table, key="key", key_group=KG)
        assert out is not None
        sums += out.column("new_sum").to_pylist()
    assert sums == [total for _, _, total in expected]
    assert task.backend.current_key == "outside"
    keys = {k for k, _ in events}
    assert stored(task, keys) == {k: model_value(model_sums(events)[1], k) for k in keys}
    task.close()


def test_per_record_vectorized_key_of_the_wrong_type_is_a_clear_error(tmp_path: Path) -> None:
    task = task_of("rocksdb", tmp_path, RunningAggregate("value", TOTAL, output="new_sum"))
    table = pa.table(
        {
            "key": pa.array([3, 4], pa.int64()),
            "value": pa.array([1, 2], pa.int64()),
            KG: pa.array([assign_to_key_group(k, MAX_P) for k in (3, 4)], pa.int32()),
        }
    )
    with pytest.raises(KeyTypeError, match="key 3 of type int does not match .* string"):
        task.process_keyed_table(table, key="key", key_group=KG)
    assert list(task.backend.keys("total")) == []
    task.close()
