"""statecore.testing: the harness runs a function in the real task, on either backend, without
Spark; the examples of docs/testing.md run in it."""

from __future__ import annotations

import re
from collections import namedtuple
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from statecore import (
    AggregateFunction,
    AggregatingStateDescriptor,
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    OnTimerContext,
    ReducingStateDescriptor,
    RuntimeContext,
    StateTtlConfig,
    TimeDomain,
    ValueStateDescriptor,
)
from statecore.errors import (
    ConfigError,
    MaxParallelismMismatchError,
    StateMigrationError,
    UnknownStateError,
)
from statecore.runtime.task import KeyedOperatorTask
from statecore.testing import KeyedProcessFunctionHarness

DOCS = Path(__file__).resolve().parents[1] / "docs"  # the README's guides, moved there
BACKENDS = ["heap", "rocksdb"]

Event = namedtuple("Event", "user amount")


class Alarms(KeyedProcessFunction):
    """Sums amounts; an event-time timer 100 ms after each element, a processing-time timer
    1 s after the first one of a key."""

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", int))

    def process_element(self, event: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.total.update(self.total.value() + event.amount)
        self.seen.add(event.amount)
        assert ctx.timestamp is not None
        ctx.timer_service.register_event_time_timer(ctx.timestamp + 100)
        if len(self.seen.get()) == 1:
            now = ctx.timer_service.current_processing_time()
            ctx.timer_service.register_processing_time_timer(now + 1000)
        yield "element", ctx.current_key, self.total.value()

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[Any, ...]]:
        yield ctx.time_domain.value, ctx.current_key, timestamp


@pytest.mark.parametrize("backend", BACKENDS)
def test_harness_feeds_elements_through_the_real_task(backend: str) -> None:
    with KeyedProcessFunctionHarness(Alarms(), key="user", backend=backend) as harness:
        assert isinstance(harness.task, KeyedOperatorTask)
        assert harness.process_element(Event("a", 2), timestamp=10) == [("element", "a", 2)]
        harness.process_elements([Event("b", 5), Event("a", 3)], timestamps=[20, 30])
        assert harness.output == [("element", "a", 2), ("element", "b", 5), ("element", "a", 5)]
        assert harness.state("total", key="a") == 5
        assert harness.state("seen", key="a") == [2, 3]
        assert harness.state("total", key="nobody") == 0  # the default
        assert harness.keys("total") == ["a", "b"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_harness_watermark_fires_event_time_timers_in_timestamp_order(backend: str) -> None:
    with KeyedProcessFunctionHarness(Alarms(), key="user", backend=backend) as harness:
        harness.process_elements(
            [Event("a", 1), Event("b", 1), Event("a", 1)], timestamps=[50, 10, 30]
        )
        assert harness.advance_watermark(129) == [("event_time", "b", 110)]
        assert harness.watermark == 129
        assert [(t.key, t.timestamp) for t in harness.timers(TimeDomain.EVENT_TIME)] == [
            ("a", 130),
            ("a", 150),
        ]
        assert harness.advance_watermark(150) == [
            ("event_time", "a", 130),
            ("event_time", "a", 150),
        ]
        assert harness.advance_watermark(100) == []  # the watermark never moves back
        assert harness.watermark == 150


def test_harness_processing_time_fires_timers_and_drives_ttl() -> None:
    class Remember(KeyedProcessFunction):
        def open(self, ctx: RuntimeContext) -> None:
            ttl = StateTtlConfig(ttl=timedelta(seconds=10))
            self.last = ctx.get_state(ValueStateDescriptor("last", int, ttl=ttl))

        def process_element(self, event: Any, ctx: Context) -> None:
            self.last.update(event.amount)
            ctx.timer_service.register_processing_time_timer(
                ctx.timer_service.current_processing_time() + 5_000
            )

        def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[Any, ...]]:
            yield ctx.time_domain, ctx.current_key, timestamp, self.last.value()

    with KeyedProcessFunctionHarness(Remember(), key="user", processing_time=1_000) as harness:
        harness.process_element(Event("a", 7))
        assert harness.set_processing_time(5_999) == []
        assert harness.set_processing_time(6_000) == [(TimeDomain.PROCESSING_TIME, "a", 6_000, 7)]
        assert harness.state("last", key="a") == 7
        harness.set_processing_time(11_001)  # 10 s after the write: expired
        assert harness.state("last", key="a") is None
        with pytest.raises(ConfigError, match="forward only"):
            harness.set_processing_time(11_000)
        assert harness.processing_time == 11_001


def test_harness_lists_pending_timers_of_both_domains() -> None:
    with KeyedProcessFunctionHarness(Alarms(), key="user") as harness:
        harness.process_element(Event("a", 1), timestamp=400)
        assert [(t.time_domain, t.key, t.timestamp) for t in harness.timers()] == [
            (TimeDomain.EVENT_TIME, "a", 500),
            (TimeDomain.PROCESSING_TIME, "a", 1000),
        ]
        assert [t.timestamp for t in harness.timers(TimeDomain.PROCESSING_TIME)] == [1000]
        harness.advance_watermark(500)
        harness.set_processing_time(1000)
        assert harness.timers() == []


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_harness_snapshot_keeps_a_restored_state_not_declared_since(backend: str) -> None:
    """Found by the reference model (test_reference_model_window_operator_matches_flinks_windows):
    a count trigger declares its count state lazily, on the window's next element; a snapshot of
    a harness restored in between dropped it, so the count restarted and the window of two
    elements never fired."""
    from statecore.windows import CountTrigger, GlobalWindows, ProcessWindowFunction, window

    class Describe(ProcessWindowFunction):
        def process(self, key: Any, context: Any, elements: Any) -> Any:
            yield key, sorted(elements)

    def counting() -> Any:
        return window(GlobalWindows(), element_type=int, trigger=CountTrigger(2)).process(
            Describe()
        )

    harness = KeyedProcessFunctionHarness(counting(), key=lambda e: "a", backend=backend)
    assert harness.process_element(1) == []
    for _ in range(2):  # restored twice, no element in between
        saved = harness.snapshot()
        harness.close()
        harness = KeyedProcessFunctionHarness(
            counting(), key=lambda e: "a", backend=backend, restore=saved
        )
    with harness:
        assert sorted(saved.keyed) == ["window_contents", "window_trigger_count"]
        assert harness.process_element(2) == [("a", [1, 2])]


@pytest.mark.parametrize(("first", "second"), [("heap", "rocksdb"), ("rocksdb", "heap")])
def test_harness_snapshot_restores_state_timers_and_watermark_on_either_backend(
    first: str, second: str
) -> None:
    with KeyedProcessFunctionHarness(Alarms(), key="user", backend=first) as harness:
        harness.process_elements([Event("a", 2), Event("b", 3)], timestamps=[100, 300])
        harness.advance_watermark(250)  # a's timer at 200 fires, b's at 400 stays
        harness.set_processing_time(50)
        saved = harness.snapshot()
        harness.process_element(Event("a", 1000), timestamp=500)  # after the snapshot: lost
    assert saved.checkpoint_id == 1 and saved.watermark == 250 and saved.processing_time == 50
    with KeyedProcessFunctionHarness(Alarms(), key="user", backend=second, restore=saved) as back:
        assert back.watermark == 250 and back.processing_time == 50
        assert back.state("total", key="a") == 2 and back.state("seen", key="b") == [3]
        assert [(t.key, t.timestamp) for t in back.timers(TimeDomain.EVENT_TIME)] == [("b", 400)]
        assert back.advance_watermark(400) == [("event_time", "b", 400)]
        assert sorted(back.set_processing_time(1000)) == [
            ("processing_time", "a", 1000),  # same time: in key-group order
            ("processing_time", "b", 1000),
        ]
        assert back.snapshot().checkpoint_id == 2


def test_harness_runs_a_checkpointed_function_with_operator_state() -> None:
    class Counted(KeyedProcessFunction, CheckpointedFunction):
        def __init__(self) -> None:
            self.restored: bool | None = None
            self.snapshots: list[tuple[int, int]] = []

        def initialize_state(self, context: FunctionInitializationContext) -> None:
            self.restored = context.is_restored
            self.counts = context.operator_state_store.get_list_state(
                ListStateDescriptor("counts", int)
            )
            self.count = sum(self.counts.get())

        def snapshot_state(self, context: FunctionSnapshotContext) -> None:
            self.snapshots.append((context.checkpoint_id, context.timestamp))
            self.counts.update([self.count])

        def process_element(self, value: Any, ctx: Context) -> None:
            self.count += 1

    function = Counted()
    with KeyedProcessFunctionHarness(function, key="user", processing_time=7) as harness:
        harness.process_elements([Event("a", 1), Event("b", 1)])
        saved = harness.snapshot()
    assert function.restored is False and function.snapshots == [(1, 7)]
    assert saved.operator["counts"].column("value").to_pylist() == [2]
    again = Counted()
    with KeyedProcessFunctionHarness(again, key="user", restore=saved) as harness:
        assert again.restored is True and again.count == 2


class Sum(AggregateFunction[int, int, str]):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: int, accumulator: int) -> int:
        return accumulator + value

    def get_result(self, accumulator: int) -> str:
        return f"sum={accumulator}"

    def merge(self, a: int, b: int) -> int:
        return a + b


class EveryKind(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.pages = ctx.get_map_state(MapStateDescriptor("pages", str, int))
        self.largest = ctx.get_reducing_state(ReducingStateDescriptor("largest", max, int))
        self.sum = ctx.get_aggregating_state(AggregatingStateDescriptor("sum", Sum(), int))
        self.windows = ctx.get_list_state(ListStateDescriptor("windows", int))

    def process_element(self, event: Any, ctx: Context) -> None:
        page = f"p{event.amount}"
        self.pages.put(page, (self.pages.get(page) or 0) + 1)
        self.largest.add(event.amount)
        self.sum.add(event.amount)
        self.windows.set_current_namespace(f"w{event.amount % 2}")
        self.windows.add(event.amount)
        self.windows.set_current_namespace("")


@pytest.mark.parametrize("backend", BACKENDS)
def test_harness_reads_every_state_kind_and_namespace(backend: str) -> None:
    with KeyedProcessFunctionHarness(EveryKind(), key="user", backend=backend) as harness:
        harness.process_elements([Event("a", 3), Event("a", 4), Event("a", 3)])
        assert harness.state("pages", key="a") == {"p3": 2, "p4": 1}
        assert harness.state("largest", key="a") == 4
        assert harness.state("sum", key="a") == "sum=10"
        assert harness.state("windows", key="a", namespace="w1") == [3, 3]
        assert harness.state("windows", key="a", namespace="w0") == [4]
        assert harness.state("windows", key="a") == []
        assert harness.keys("windows", namespace="w0") == ["a"]
        with pytest.raises(UnknownStateError, match="nope"):
            harness.state("nope", key="a")


def test_harness_restore_migrates_a_widened_type_and_refuses_a_narrowed_one() -> None:
    def counter(value_type: Any) -> KeyedProcessFunction:
        class Counter(KeyedProcessFunction):
            def open(self, ctx: RuntimeContext) -> None:
                self.n = ctx.get_state(ValueStateDescriptor("n", value_type, default=0))

            def process_element(self, value: Any, ctx: Context) -> None:
                self.n.update(self.n.value() + 1)

        return Counter()

    with KeyedProcessFunctionHarness(counter(pa.int32()), key="user") as harness:
        harness.process_element(Event("a", 1))
        saved = harness.snapshot()
    assert saved.keyed["n"]  # rows of a's key group
    with KeyedProcessFunctionHarness(counter(pa.int64()), key="user", restore=saved) as wider:
        assert wider.state("n", key="a") == 1
    with pytest.raises(StateMigrationError, match="'n'"):
        KeyedProcessFunctionHarness(counter(pa.string()), key="user", restore=saved).state(
            "n", key="a"
        )


def test_harness_restore_refuses_another_max_parallelism() -> None:
    with KeyedProcessFunctionHarness(Alarms(), key="user") as harness:
        saved = harness.snapshot()
    with pytest.raises(MaxParallelismMismatchError, match="128"):
        KeyedProcessFunctionHarness(Alarms(), key="user", max_parallelism=256, restore=saved)


def test_harness_key_selector_function_and_int_keys() -> None:
    class Echo(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context) -> Iterator[Any]:
            yield ctx.current_key, value

    with KeyedProcessFunctionHarness(Echo(), key=lambda r: r[0], key_type=int) as harness:
        assert harness.process_elements([(7, "x"), (-1, "y")]) == [(7, (7, "x")), (-1, (-1, "y"))]


def readme_block(page: str, heading: str) -> str:
    """The first ```python block after ``heading`` in ``docs/<page>``."""
    text = (DOCS / page).read_text()
    start = text.index(heading)
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None, heading
    return match.group(1)


def test_harness_readme_example_runs() -> None:
    code = readme_block("testing.md", "# Unit-testing a function")
    assert "KeyedProcessFunctionHarness" in code and "restore=saved" in code
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(code, str(DOCS / "testing.md"), "exec"), namespace)  # the docs' own code
    assert namespace["harness"].output == [("ann", 2)]


def test_harness_runs_the_readme_running_total_unchanged() -> None:
    code = readme_block("jobs.md", "# Writing a stateful job")
    function_part = code[: code.index("\nrun = keyed_process(")]
    lines = [line for line in function_part.splitlines() if "pyspark" not in line]
    lines = [line for line in lines if "statecore.spark" not in line]
    namespace: dict[str, Any] = {"__name__": "readme_running_total"}
    exec(compile("\n".join(lines), str(DOCS / "jobs.md"), "exec"), namespace)
    Row = namedtuple("Row", "user_id amount event_type")
    with KeyedProcessFunctionHarness(namespace["RunningTotal"](), key="user_id") as harness:
        harness.process_elements([Row("u", 2.0, "view"), Row("u", 3.5, "buy")])
        assert harness.output == [("u", 2.0), ("u", 5.5)]
        assert harness.state("recent", key="u") == ["view", "buy"]
