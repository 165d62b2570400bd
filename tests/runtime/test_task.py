"""The operator task: timers and on_timer, event time, CheckpointedFunction, and their
checkpoints restored at another parallelism (in-process, on real Delta tables)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import HeapKeyedStateBackend
from statecore.backends.timers import TimeDomain
from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, ValueStateDescriptor
from statecore.errors import ConfigError, KeyGroupOutOfRangeError, StateDescriptorConflictError
from statecore.keygroups import KeyGroupRange
from statecore.runtime import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
)
from statecore.runtime.task import KeyedOperatorTask
from statecore.ttl import CleanupStrategy, ManualTimeProvider, StateTtlConfig
from statecore.types import TypeInfo
from tests.inprocess import run_checkpoint


def task_for(
    function: KeyedProcessFunction,
    clock: ManualTimeProvider | None = None,
) -> KeyedOperatorTask:
    backend = HeapKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, 127),
        max_parallelism=128,
        ttl_time_provider=clock,
    )
    task = KeyedOperatorTask(
        function, backend, job="j", operator="main", subtask_index=0, parallelism=1
    )
    task.open()
    return task


class Alarm(KeyedProcessFunction):
    """An event-time alarm 100 ms after each record, a processing-time one in a namespace."""

    def open(self, ctx: RuntimeContext) -> None:
        self.last = ctx.get_state(ValueStateDescriptor("last", int))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        assert ctx.timestamp is not None
        self.last.update(ctx.timestamp)
        ctx.timer_service.register_event_time_timer(ctx.timestamp + 100)
        ctx.timer_service.register_processing_time_timer(
            ctx.timer_service.current_processing_time() + 10, namespace="idle"
        )
        yield ctx.current_key, "event", ctx.timestamp

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[Any, ...]]:
        assert ctx.timestamp == timestamp
        if ctx.time_domain is TimeDomain.EVENT_TIME:
            yield ctx.current_key, "alarm", timestamp, self.last.value()
        else:
            yield ctx.current_key, ctx.namespace, timestamp


class TestTimers:
    def test_event_time_from_a_batch_and_on_timer(self) -> None:
        clock = ManualTimeProvider(5_000)
        task = task_for(Alarm(), clock)
        start = datetime(2026, 1, 1, tzinfo=UTC)
        batch = pa.RecordBatch.from_pydict(
            {
                "user": ["a", "b", "a"],
                "kg": [None, None, None],
                "ts": pa.array(
                    [start.replace(microsecond=1000 * i + 7) for i in (0, 50, 300)],
                    pa.timestamp("us", tz="UTC"),
                ),
            }
        )
        millis = int(start.timestamp() * 1000)
        out = task.process_batch(batch, key="user", key_group="kg", event_time="ts")
        assert [r[2] for r in out] == [millis, millis + 50, millis + 300]
        fired = task.advance_watermark(millis + 150)
        assert fired == [
            ("a", "alarm", millis + 100, millis + 300),
            ("b", "alarm", millis + 150, millis + 50),
        ]
        assert task.advance_processing_time() == []
        clock.advance(10)
        assert sorted(task.advance_processing_time()) == [
            ("a", "idle", 5_010),
            ("b", "idle", 5_010),
        ]
        assert task.advance_watermark(millis + 400) == [("a", "alarm", millis + 400, millis + 300)]

    def test_integer_event_time(self) -> None:
        task = task_for(Alarm())
        batch = pa.RecordBatch.from_pydict({"user": ["a"], "kg": [None], "ts": [1234]})
        assert task.process_batch(batch, key="user", key_group="kg", event_time="ts") == [
            ("a", "event", 1234)
        ]

    def test_timers_restore_at_another_parallelism_and_fire_once(
        self, statecore_home: StatecoreConfig
    ) -> None:
        records = [(f"u{i}", i) for i in range(20)]
        seen: Counter[tuple[Any, ...]] = Counter()
        plan = [(2, 5), (3, 12), (1, 1000)]  # (parallelism, watermark)
        for checkpoint_id, (p, watermark) in enumerate(plan, start=1):
            out, _ = run_checkpoint(
                statecore_home,
                Scheduler(),
                records if checkpoint_id == 1 else [],
                job="timers",
                checkpoint_id=checkpoint_id,
                parallelism=p,
                watermark=watermark,
            )
            assert all(ts <= watermark for _, ts in out)
            seen.update(out)
        assert seen == Counter({(f"u{i}", i): 1 for i in range(20)})


class Scheduler(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Context) -> None:
        ctx.timer_service.register_event_time_timer(value)
        ctx.timer_service.register_event_time_timer(value)  # one per key and timestamp

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[Any, ...]]:
        yield ctx.current_key, timestamp


class Counting(KeyedProcessFunction, CheckpointedFunction):
    """Counts records per key (keyed) and per subtask (operator state, split on rescale)."""

    calls: list[str]

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.calls = ["initialize_state"]
        self.restored = context.is_restored
        self.batches = context.operator_state_store.get_list_state(
            ListStateDescriptor("batches", int)
        )
        self.per_key = context.keyed_state_store.get_state(ValueStateDescriptor("per_key", int))
        self.seen = 0

    def open(self, ctx: RuntimeContext) -> None:
        self.calls.append("open")

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.per_key.update((self.per_key.value() or 0) + 1)
        self.seen += 1
        yield ctx.current_key, self.per_key.value(), self.restored, self.calls[:2]

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        self.batches.add(self.seen)
        self.checkpoint = (context.checkpoint_id, context.timestamp)


class TestCheckpointedFunction:
    def test_initialize_before_open_and_restored(self, statecore_home: StatecoreConfig) -> None:
        records = [(f"u{i % 5}", i) for i in range(10)]
        first, _ = run_checkpoint(statecore_home, Counting(), records, job="c", checkpoint_id=1)
        assert {r[2] for r in first} == {False}
        assert {tuple(r[3]) for r in first} == {("initialize_state", "open")}
        second, record = run_checkpoint(
            statecore_home, Counting(), records, job="c", checkpoint_id=2, parallelism=3
        )
        assert {r[2] for r in second} == {True}
        assert sorted(r[1] for r in second if r[0] == "u0") == [3, 4]
        tables = {(t.state, t.table_kind): t for t in record.tables}
        batches = tables["batches", "operator"]  # 2 from checkpoint 1 split over 3, +1 each
        assert {subtask: rows for subtask, (rows, _) in batches.key_groups.items()} == {
            0: 2,
            1: 2,
            2: 1,
        }
        assert tables["per_key", "keyed"].rows == 5

    def test_snapshot_context(self, tmp_path: Any) -> None:
        function = Counting()
        task = task_for(function, ManualTimeProvider(777))
        task.process([("a", None, 1)])
        results = task.snapshot(lambda kind, name: f"{tmp_path}/{kind}/{name}", checkpoint_id=3)
        assert function.checkpoint == (3, 777)
        by_table = {(r.table_kind, r.state): r for r in results}
        assert by_table["operator", "batches"].replace_all
        assert [f.rows for f in by_table["operator", "batches"].files] == [1]
        assert by_table["timers", "timers"].files == ()

    def test_keyed_and_operator_state_names_must_differ(self) -> None:
        class Clash(Counting):
            def open(self, ctx: RuntimeContext) -> None:
                ctx.get_state(ValueStateDescriptor("batches", int))

        with pytest.raises(StateDescriptorConflictError, match="batches"):
            task_for(Clash())

    def test_timers_is_a_reserved_name(self) -> None:
        class Reserved(KeyedProcessFunction):
            def open(self, ctx: RuntimeContext) -> None:
                ctx.get_state(ValueStateDescriptor("timers", int))

            def process_element(self, value: Any, ctx: Context) -> None:
                return None

        with pytest.raises(ConfigError, match="reserved"):
            task_for(Reserved())


class Total(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.total.update(self.total.value() + value.amount)
        yield ctx.current_key, self.total.value()


class TestProcessBatch:
    """The backend's per-batch key-group check and its key-setter in the record loop."""

    def _task(self, key_groups: KeyGroupRange) -> KeyedOperatorTask:
        backend = HeapKeyedStateBackend(
            key_type=TypeInfo.of(str), key_group_range=key_groups, max_parallelism=128
        )
        task = KeyedOperatorTask(
            Total(), backend, job="j", operator="main", subtask_index=0, parallelism=1
        )
        task.open()
        return task

    def test_keys_and_key_groups_current_per_record(self) -> None:
        task = self._task(KeyGroupRange(0, 127))
        batch = pa.RecordBatch.from_pydict(
            {"user": ["a", "b", "a"], "kg": [3, 9, 3], "amount": [1, 2, 3]}
        )
        assert task.process_batch(batch, key="user", key_group="kg") == [
            ("a", 1),
            ("b", 2),
            ("a", 4),
        ]
        assert task.backend.changed_key_groups("total") == {3, 9}
        assert task.records == 3

    def test_a_key_group_outside_the_range_fails_before_any_record(self) -> None:
        task = self._task(KeyGroupRange(0, 63))
        batch = pa.RecordBatch.from_pydict({"user": ["a", "b"], "kg": [3, 64], "amount": [1, 2]})
        with pytest.raises(KeyGroupOutOfRangeError, match="key 'b' is in key group 64"):
            task.process_batch(batch, key="user", key_group="kg")
        assert task.records == 0
        assert task.backend.changed_key_groups("total") == set()

    def test_per_record_ttl_cleanup_runs_at_every_record(self) -> None:
        backend = _CountingCleanup(
            key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 127), max_parallelism=128
        )
        backend.get_partitioned_state(
            ListStateDescriptor(
                "seen",
                str,
                ttl=StateTtlConfig(
                    ttl=timedelta(seconds=1),
                    cleanup=CleanupStrategy.INCREMENTAL,
                    run_cleanup_for_every_record=True,
                ),
            )
        )
        task = KeyedOperatorTask(
            Total(), backend, job="j", operator="main", subtask_index=0, parallelism=1
        )
        task.open()
        batch = pa.RecordBatch.from_pydict(
            {"user": ["a", "b", "a"], "kg": [3, 9, 3], "amount": [1, 2, 3]}
        )
        task.process_batch(batch, key="user", key_group="kg")
        assert backend.cleanups == 3  # the function never reads "seen": one per record


class _CountingCleanup(HeapKeyedStateBackend):
    """A heap backend counting its incremental TTL cleanup steps."""

    cleanups = 0

    def _cleanup_incrementally(self, state_name: str, purge: Any, count: int) -> None:
        self.cleanups += 1
        super()._cleanup_incrementally(state_name, purge, count)


class LazyTtl(KeyedProcessFunction):
    """Registers a TTL state with cleanup on every record at its first record."""

    def open(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx
        self.seen: Any = None

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        if self.seen is None:
            self.seen = self.ctx.get_list_state(
                ListStateDescriptor(
                    "seen",
                    str,
                    ttl=StateTtlConfig(
                        ttl=timedelta(seconds=1),
                        cleanup=CleanupStrategy.INCREMENTAL,
                        run_cleanup_for_every_record=True,
                    ),
                )
            )
        self.seen.add(value.user)
        yield (ctx.current_key,)


def test_latent_ttl_cleanup_per_record_of_a_state_registered_mid_batch() -> None:
    """A TTL state with cleanup on every record, registered lazily at the batch's first
    record, is cleaned up at each record after it in the same batch."""
    backend = _CountingCleanup(
        key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 127), max_parallelism=128
    )
    task = KeyedOperatorTask(
        LazyTtl(), backend, job="j", operator="main", subtask_index=0, parallelism=1
    )
    task.open()
    batch = pa.RecordBatch.from_pydict({"user": ["a", "b", "c", "d"], "kg": [3, 9, 3, 9]})
    assert len(task.process_batch(batch, key="user", key_group="kg")) == 4
    # one step per access (4), and one per record after the one that registered it (3)
    assert backend.cleanups == 4 + 3
    task.process_batch(batch, key="user", key_group="kg")
    assert backend.cleanups == 7 + 4 + 4


class FailingOpen(KeyedProcessFunction):
    closed = False

    def open(self, ctx: RuntimeContext) -> None:
        ctx.get_state(ValueStateDescriptor("total", int))
        raise RuntimeError("cannot open")

    def process_element(self, value: Any, ctx: Context) -> None:
        return None

    def close(self) -> None:
        type(self).closed = True


def test_latent_probe_states_closes_a_function_whose_open_raises() -> None:
    from statecore.runtime.task import probe_states

    with pytest.raises(RuntimeError, match="cannot open"):
        probe_states(
            FailingOpen(),
            TypeInfo.of(str),
            job="j",
            operator="main",
            parallelism=1,
            max_parallelism=128,
        )
    assert FailingOpen.closed
