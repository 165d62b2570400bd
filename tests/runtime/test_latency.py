"""State-access latency tracking: sampled per state and access, merged into percentiles."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from statecore.backends import HeapKeyedStateBackend
from statecore.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statecore.errors import ConfigError
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.runtime.latency import LatencyTracking, latency_percentiles
from statecore.runtime.task import KeyedOperatorTask
from statecore.state import ListState, MapState, ValueState
from statecore.types import TypeInfo

MAX_P = 128


class Counts(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", int))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", str))
        self.per_item = ctx.get_map_state(MapStateDescriptor("per_item", str, int))

    def process_element(self, value: Any, ctx: Context) -> list[Any]:
        value = value if isinstance(value, str) else value.item  # a record of a batch
        self.count.update((self.count.value() or 0) + 1)
        self.seen.add(value)
        self.per_item.put(value, (self.per_item.get(value) or 0) + 1)
        return [(ctx.current_key, self.count.value())]


def task(latency: LatencyTracking | None) -> KeyedOperatorTask:
    backend = HeapKeyedStateBackend(
        key_type=TypeInfo.of(str),
        key_group_range=KeyGroupRange(0, MAX_P - 1),
        max_parallelism=MAX_P,
    )
    t = KeyedOperatorTask(
        Counts(),
        backend,
        job="j",
        operator="main",
        subtask_index=0,
        parallelism=1,
        latency=latency,
    )
    t.open()
    return t


def records(n: int) -> list[tuple[str, int, str]]:
    keys = [f"k{i % 37}" for i in range(n)]
    return [(k, assign_to_key_group(k, MAX_P), f"item{i % 3}") for i, k in enumerate(keys)]


def test_latency_tracking_samples_every_nth_record_per_state_and_access() -> None:
    tracked = task(LatencyTracking(sample_interval=10, history_size=16))
    plain = task(None)
    assert tracked.process(records(1000)) == plain.process(records(1000))
    # the function holds the backend's own states, back in their classes between samples
    assert type(tracked.function.count) is type(plain.function.count)
    assert isinstance(tracked.function.seen, ListState)
    report = tracked.tracker.report()
    assert set(report) == {"count", "seen", "per_item"}
    assert set(report["count"]) == {"value", "update"}
    assert set(report["per_item"]) == {"get", "put"}
    # 100 sampled records, 2 reads of count each, kept to the last 16 samples
    assert len(report["count"]["value"]) == 16 and len(report["seen"]["add"]) == 16
    assert all(s > 0 for s in report["count"]["update"])
    assert plain.tracker is None


def test_latency_tracking_through_arrow_batches_and_merged_percentiles() -> None:
    tracked = task(LatencyTracking(sample_interval=100, history_size=128))
    rows = records(2000)
    batch = pa.record_batch(
        {
            "key": [k for k, _, _ in rows],
            "item": [v for _, _, v in rows],
            "__kg": pa.array([g for _, g, _ in rows], pa.int32()),
        }
    )
    tracked.process_batch(batch, key="key", key_group="__kg")
    report = tracked.tracker.report()
    assert len(report["seen"]["add"]) == 20  # records 0, 100, ..., 1900
    merged = latency_percentiles([report, report])
    add = merged["seen"]["add"]
    assert add["samples"] == 40
    assert 0 < add["p50_us"] <= add["p95_us"] <= add["p99_us"]


def test_latency_tracking_bad_settings() -> None:
    with pytest.raises(ConfigError, match="positive"):
        LatencyTracking(sample_interval=0)


class MapUse(KeyedProcessFunction):
    """Every way into a MapState and a TTL state: methods, operators, iteration, properties."""

    def open(self, ctx: RuntimeContext) -> None:
        from datetime import timedelta

        from statecore.ttl import StateTtlConfig

        self.items = ctx.get_map_state(MapStateDescriptor("items", str, int))
        self.last = ctx.get_state(
            ValueStateDescriptor("last", str, ttl=StateTtlConfig(ttl=timedelta(hours=1)))
        )

    def process_element(self, value: Any, ctx: Context) -> list[Any]:
        items = self.items
        items[value] = (items[value] if value in items else 0) + 1  # noqa: SIM401 (the operators)
        self.last.update(value)
        return [(ctx.current_key, sorted(items), sorted(items.items()), self.last.value())]


def test_latency_tracking_timed_states_behave_as_the_states() -> None:
    def run(latency: LatencyTracking | None) -> list[Any]:
        backend = HeapKeyedStateBackend(
            key_type=TypeInfo.of(str),
            key_group_range=KeyGroupRange(0, MAX_P - 1),
            max_parallelism=MAX_P,
        )
        t = KeyedOperatorTask(
            MapUse(),
            backend,
            job="j",
            operator="main",
            subtask_index=0,
            parallelism=1,
            latency=latency,
        )
        t.open()
        return t.process(records(300)), t

    plain, _ = run(None)
    tracked, t = run(LatencyTracking(sample_interval=7, history_size=8))
    assert tracked == plain
    assert isinstance(t.function.items, MapState) and isinstance(t.function.last, ValueState)
    assert set(t.tracker.report()) == {"items", "last"}


class Failing(Counts):
    def process_element(self, value: Any, ctx: Context) -> list[Any]:
        out = super().process_element(value, ctx)
        if value == "item2":
            raise ValueError("bad record")
        return out


def test_latency_tracking_a_failing_sampled_record_leaves_the_states_as_they_were() -> None:
    t = task(LatencyTracking(sample_interval=1))
    t.function = Failing()
    t.function.open(t.runtime_context)
    classes = {n: type(getattr(t.function, n)) for n in ("count", "seen", "per_item")}
    with pytest.raises(ValueError, match="bad record"):
        t.process(records(3))  # item0, item1 sampled, item2 raises while sampled
    assert {n: type(getattr(t.function, n)) for n in classes} == classes
    assert len(t.tracker.report()["count"]["update"]) == 3
