"""Flink semantics through the real Spark runtime: timers and TTL across a rescale, operator
state at parallelism 1 → 3 → 2, schema changes checked before any record is processed, and
the function's ``open`` run only in the tasks (none on the driver)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import types as T

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statecore.errors import ConfigError, StateMigrationError
from statecore.query import run_sql
from statecore.runtime import (
    MAX_WATERMARK,
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
)
from statecore.spark import keyed_process
from statecore.ttl import ManualTimeProvider, StateTtlConfig, StateVisibility

pytestmark = pytest.mark.spark

MINUTE = 60_000
TTL = StateTtlConfig(ttl=timedelta(minutes=30), visibility=StateVisibility.NEVER_RETURN_EXPIRED)
T0 = 1_800_000_000_000  # the processing-time clock of the first run
DAY = datetime(2026, 1, 1, tzinfo=UTC)

REMINDER_OUT = T.StructType(
    [
        T.StructField("user_id", T.StringType()),
        T.StructField("what", T.StringType()),
        T.StructField("at", T.LongType()),
        T.StructField("count", T.LongType()),
        T.StructField("amounts", T.LongType()),
    ]
)


class Reminders(KeyedProcessFunction):
    """Per user: an event count and the amounts (both with TTL), and a reminder timer
    10 minutes of event time after each event."""

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", int, ttl=TTL))
        self.amounts = ctx.get_list_state(ListStateDescriptor("amounts", float, ttl=TTL))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        seen = self.count.value()
        self.count.update((seen or 0) + 1)
        self.amounts.add(value.amount)
        assert ctx.timestamp is not None
        ctx.timer_service.register_event_time_timer(ctx.timestamp + 10 * MINUTE)
        yield ctx.current_key, "event", ctx.timestamp, seen, len(self.amounts.get())

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[Any, ...]]:
        assert ctx.timer_service.current_watermark() >= timestamp
        yield ctx.current_key, "timer", timestamp, self.count.value(), len(self.amounts.get())


def events(spark: Any, users: range, start_minute: int, per_user: int) -> Any:
    rows = [
        (f"u{u}", DAY + timedelta(minutes=start_minute + u + 7 * i), float(u + i))
        for u in users
        for i in range(per_user)
    ]
    return spark.createDataFrame(rows, "user_id string, ts timestamp, amount double")


def collect(run: Any) -> list[tuple[Any, ...]]:
    rows = [tuple(r) for r in run.output.collect()]
    run.unpersist()
    return rows


def test_rescale_with_timers_and_ttl(spark: Any, statecore_home: StatecoreConfig) -> None:
    runs = [  # (users, first event minute, events per user, parallelism, clock)
        (range(0, 20), 0, 4, 2, T0),
        (range(0, 10), 120, 2, 3, T0 + 10 * MINUTE),  # TTL not yet expired
        (range(5, 8), 300, 1, 1, T0 + 60 * MINUTE),  # everything written before is expired
    ]
    outputs = []
    watermarks = []
    for checkpoint_id, (users, start, per_user, p, now) in enumerate(runs, start=1):
        df = events(spark, users, start, per_user)
        run = keyed_process(
            df,
            key="user_id",
            function=Reminders(),
            output_schema=REMINDER_OUT,
            job="reminders",
            checkpoint_id=checkpoint_id,
            parallelism=p,
            order_by=["ts"],
            event_time="ts",
            allowed_lateness=timedelta(minutes=5),
            processing_time=ManualTimeProvider(now),
        )
        assert run.checkpoint.status is CheckpointStatus.COMPLETED
        assert run.checkpoint.parallelism == p
        outputs.append(collect(run))
        latest = max(r[2] for r in outputs[-1] if r[1] == "event")
        watermarks.append(latest - 5 * MINUTE)

    registered = {(r[0], r[2] + 10 * MINUTE) for out in outputs for r in out if r[1] == "event"}
    fired = Counter((r[0], r[2]) for out in outputs for r in out if r[1] == "timer")
    assert set(fired.values()) == {1}, "every timer fires once"
    assert set(fired) == {t for t in registered if t[1] <= watermarks[-1]}
    for i, out in enumerate(outputs):  # timers fire in the run whose watermark passes them
        for _, what, at, _, _ in out:
            if what == "timer":
                assert at <= watermarks[i] and (i == 0 or at > watermarks[i - 1])
    # run 2 (p=3) restored the counts written at p=2; run 3 never sees expired values
    second = {r[0]: r[3] for r in sorted(outputs[1], key=lambda r: r[2]) if r[1] == "event"}
    assert all(second[f"u{u}"] == 5 for u in range(10))
    third = sorted((r for r in outputs[2]), key=lambda r: (r[0], r[2]))
    assert [r[3] for r in third if r[1] == "event"] == [None, None, None]
    for _, what, _, count, amounts in third:
        if what == "timer":
            assert count in (None, 1) and amounts <= 1  # only what run 3 wrote
    pending = {
        (r["key"], r["timestamp"])
        for r in run_sql(
            Catalog.connect(statecore_home.catalog_url),
            "SELECT key, timestamp FROM reminders.timers",
            job="reminders",
        ).to_pylist()
    }
    assert pending == {t for t in registered if t[1] > watermarks[-1]}
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        ttl_rows = run_sql(
            catalog, "SELECT key, value, ttl_timestamp FROM reminders.count", job="reminders"
        ).to_pylist()
        kinds = {(t.state, t.table_kind) for t in catalog.latest_checkpoint("reminders").tables}
    assert {"ttl_timestamp"} <= set(ttl_rows[0])
    assert {r["ttl_timestamp"] for r in ttl_rows if r["key"] in ("u5", "u6", "u7")} == {
        T0 + 60 * MINUTE
    }
    assert kinds == {("count", "keyed"), ("amounts", "keyed"), ("timers", "timers")}


OFFSETS_OUT = T.StructType(
    [T.StructField("user_id", T.StringType()), T.StructField("threshold", T.LongType())]
)


class Offsets(KeyedProcessFunction, CheckpointedFunction):
    """Operator state of every mode: split lists, a union list and a broadcast map."""

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        store = context.operator_state_store
        self.offsets = store.get_list_state(ListStateDescriptor("offsets", int))
        self.more = store.get_list_state(ListStateDescriptor("more", int))
        self.subtasks = store.get_union_list_state(ListStateDescriptor("subtasks", str))
        self.rules = store.get_broadcast_state(MapStateDescriptor("rules", str, int))
        self.restored = context.is_restored

    def open(self, ctx: RuntimeContext) -> None:
        self.subtask = ctx.subtask_index

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        yield ctx.current_key, self.rules.get("threshold")

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        assert context.checkpoint_id >= 1 and context.timestamp > 0
        if not self.restored:
            self.offsets.add_all(range(10))
            self.more.add_all(range(100, 107))
            self.subtasks.add(f"sub{self.subtask}")
            self.rules.put("threshold", 7)


def test_operator_state_1_3_2(spark: Any, statecore_home: StatecoreConfig) -> None:
    df = spark.createDataFrame([(f"u{i}",) for i in range(12)], "user_id string")
    contents: dict[tuple[str, int], list[list[Any]]] = {}
    for checkpoint_id, p in enumerate((1, 3, 2), start=1):
        run = keyed_process(
            df,
            key="user_id",
            function=Offsets(),
            output_schema=OFFSETS_OUT,
            job="offsets",
            checkpoint_id=checkpoint_id,
            parallelism=p,
        )
        rows = collect(run)
        assert len(rows) == 12
        if checkpoint_id > 1:  # every subtask restored the broadcast rules
            assert {r[1] for r in rows} == {7}
        with Catalog.connect(statecore_home.catalog_url) as catalog:
            for state in ("offsets", "more", "subtasks", "rules"):
                table = run_sql(
                    catalog, f"SELECT subtask, mode, value FROM offsets.{state}", job="offsets"
                ).to_pylist()
                by_subtask: dict[int, list[Any]] = {}
                for r in table:
                    by_subtask.setdefault(r["subtask"], []).append(r["value"])
                contents[state, p] = [sorted(by_subtask.get(i, [])) for i in range(p)]
            records = {t.state: t for t in catalog.latest_checkpoint("offsets").tables}
            states = {s.name: s.kind for s in catalog.list_states("offsets")}
        assert records["offsets"].table_kind == "operator"
        assert states == {
            "offsets": "operator_list",
            "more": "operator_list",
            "subtasks": "union_list",
            "rules": "broadcast",
        }
    counts = {k: [len(part) for part in v] for k, v in contents.items()}
    # Split states in order of name: "more" (7 elements) puts its remainder on subtask 0, and
    # "offsets" (10) starts where "more" ran out of remainder (subtask 1), as Flink rotates it.
    assert counts["more", 1] == [7] and counts["offsets", 1] == [10]
    assert contents["more", 3] == [[100, 101, 102], [103, 104], [105, 106]]
    assert contents["offsets", 3] == [[7, 8, 9], [0, 1, 2, 3], [4, 5, 6]]
    assert contents["more", 2] == [[100, 101, 102, 103], [104, 105, 106]]
    assert contents["offsets", 2] == [[2, 3, 4, 5, 6], [0, 1, 7, 8, 9]]  # 7,8,9,0,1 | 2..6
    assert counts["subtasks", 3] == [1, 1, 1]  # union: everything everywhere
    assert contents["subtasks", 2] == [["sub0"] * 3, ["sub0"] * 3]
    assert counts["rules", 3] == [1, 1, 1] and counts["rules", 2] == [1, 1]  # i % old_p


TOTALS_OUT = T.StructType(
    [T.StructField("user_id", T.StringType()), T.StructField("total", T.LongType())]
)


class Totals(KeyedProcessFunction):
    def __init__(self, state_type: Any) -> None:
        self.state_type = state_type

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", self.state_type))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        total = (self.total.value() or 0) + 1
        self.total.update(total)
        yield ctx.current_key, total


def test_schema_changes_are_checked_before_processing(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    import pyarrow as pa

    df = spark.createDataFrame([(f"u{i}",) for i in range(6)], "user_id string")
    first = keyed_process(
        df,
        key="user_id",
        function=Totals(pa.int32()),
        output_schema=TOTALS_OUT,
        job="totals",
        checkpoint_id=1,
    )
    collect(first)
    with pytest.raises(StateMigrationError, match="'totals'.*'main'.*'total'.*int32 to string"):
        keyed_process(
            df,
            key="user_id",
            function=Totals(str),
            output_schema=TOTALS_OUT,
            job="totals",
            checkpoint_id=2,
        )
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        failed = catalog.get_checkpoint("totals", 2)
        assert failed.status is CheckpointStatus.FAILED and "StateMigrationError" in failed.error
        assert catalog.latest_checkpoint("totals").checkpoint_id == 1
    widened = keyed_process(
        df,
        key="user_id",
        function=Totals(int),
        output_schema=TOTALS_OUT,
        job="totals",
        checkpoint_id=3,
        parallelism=3,
    )
    assert sorted(collect(widened)) == [(f"u{i}", 2) for i in range(6)]
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        rows = run_sql(
            catalog,
            "SELECT typeof(value) AS t, count(*) AS n FROM totals.total GROUP BY 1",
            job="totals",
        ).to_pylist()
    assert rows == [{"t": "BIGINT", "n": 6}]  # every key group rewritten in the new schema


class Witness(CheckpointedFunction, KeyedProcessFunction):
    """Writes a line per ``initialize_state`` and ``open`` call: the process and what it was
    told, so a test sees where user code ran and how often."""

    def __init__(self, log: str) -> None:
        self.log = log
        self.restored: bool | None = None

    def _note(self, what: str) -> None:
        with open(self.log, "a") as out:
            out.write(f"{what} {os.getpid()} {self.restored}\n")

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.restored = context.is_restored
        self._note("initialize_state")

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        pass

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int))
        self._note("open")

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        total = (self.total.value() or 0) + 1
        self.total.update(total)
        yield ctx.current_key, total


def test_no_user_code_on_the_driver_open_runs_once_per_task_told_is_restored(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Any
) -> None:
    """Flink calls ``initialize_state`` and ``open`` once per task, with ``is_restored`` true
    when the task restores: the driver never runs them (no probe for the states' schemas)."""
    df = spark.createDataFrame([(f"u{i}",) for i in range(8)], "user_id string")
    for checkpoint_id in (1, 2):
        log = tmp_path / f"run{checkpoint_id}.log"
        run = keyed_process(
            df,
            key="user_id",
            function=Witness(str(log)),
            output_schema=TOTALS_OUT,
            job="witness",
            checkpoint_id=checkpoint_id,
            parallelism=2,
        )
        assert sorted(collect(run)) == [(f"u{i}", checkpoint_id) for i in range(8)]
        calls = [line.split() for line in log.read_text().splitlines()]
        assert calls, "the tasks ran the function"
        assert str(os.getpid()) not in {pid for _, pid, _ in calls}, "user code ran on the driver"
        opened = [c for c in calls if c[0] == "open"]
        initialized = [c for c in calls if c[0] == "initialize_state"]
        assert 1 <= len(opened) == len(initialized) <= 2  # once per task, none more
        assert {restored for _, _, restored in calls} == {str(checkpoint_id == 2)}


def test_clickstream_keeps_offsets_and_rules_across_a_rescale(
    spark: Any, statecore_home: StatecoreConfig, tmp_path: Any
) -> None:
    from jobs import clickstream
    from statecore.cli.demo import generate_clickstream

    days = generate_clickstream(tmp_path, days=2, users=20, events_per_day=80)
    first = clickstream.run(
        spark, spark.read.parquet(str(days[0])), checkpoint_id=1, job="clicks", parallelism=2
    )
    flagged = [r for r in first.output.collect() if r.flagged]
    first.unpersist()
    assert flagged and all(r.event_type in clickstream.DEFAULT_RULES for r in flagged)
    second = clickstream.run(
        spark,
        spark.read.parquet(str(days[1])),
        checkpoint_id=2,
        job="clicks",
        parallelism=3,
        rules={"view": 0.0},
    )
    rows = second.output.collect()
    second.unpersist()
    assert {r.flagged for r in rows if r.event_type == "view"} == {True}
    assert {r.flagged for r in rows if r.event_type != "view"} == {False}
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        processed = run_sql(
            catalog,
            "SELECT subtask, value.checkpoint_id AS cp, value.events AS n FROM clicks.processed",
            job="clicks",
        ).to_pylist()
        rules = run_sql(
            catalog, "SELECT subtask, user_key, value FROM clicks.rules", job="clicks"
        ).to_pylist()
    assert sum(r["n"] for r in processed if r["cp"] == 1) == 80
    assert sum(r["n"] for r in processed if r["cp"] == 2) == 80
    assert {r["subtask"] for r in processed} <= {0, 1, 2}
    assert sorted((r["subtask"], r["user_key"], r["value"]) for r in rules) == [
        (i, "view", 0.0) for i in range(3)
    ]


def test_end_of_input_fires_every_event_time_timer_and_ends_the_job(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    def run(checkpoint_id: int, users: range, start: int, **options: Any) -> Any:
        return keyed_process(
            events(spark, users, start, 2), key="user_id", function=Reminders(),
            output_schema=REMINDER_OUT, job="bounded", checkpoint_id=checkpoint_id,
            parallelism=2, order_by=["ts"], event_time="ts",
            processing_time=ManualTimeProvider(T0), **options,
        )  # fmt: skip

    first = run(1, range(0, 4), 0)  # more input follows: the last reminders stay pending
    fired_first = {(r[0], r[2]) for r in collect(first) if r[1] == "timer"}
    last = run(2, range(2, 6), 60, end_of_input=True)
    assert last.checkpoint.watermark == MAX_WATERMARK
    out = collect(last)
    events_at = {(r[0], r[2] + 10 * MINUTE) for r in out if r[1] == "event"}
    fired = {(r[0], r[2]) for r in out if r[1] == "timer"}
    registered_first = {
        (f"u{u}", int((DAY + timedelta(minutes=u + 7 * i + 10)).timestamp() * 1000))
        for u in range(0, 4)
        for i in range(2)
    }
    # Every reminder not fired before fires now, however far its time: the run's own and run 1's.
    assert fired == events_at | (registered_first - fired_first)
    with pytest.raises(ConfigError, match="checkpoint 2 ended its input"):
        run(3, range(0, 1), 120)
    assert run(2, range(2, 6), 60, end_of_input=True).replayed  # an Airflow retry: a no-op


def test_timer_order_in_a_spark_run_fires_between_records_and_replays_the_same(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    """Records reach a task in event-time order across its keys (whatever the input's order)
    and a reminder fires as soon as the watermark passes it: u0's reminder at minute 10 fires
    before the record at minute 12, with the count of the records before it."""
    at = [0, 3, 11, 12, 30]  # minutes; u0 at 0 and 12, u1 at 3 and 30, u2 at 11
    users = ["u0", "u1", "u2", "u0", "u1"]
    rows = [(u, DAY + timedelta(minutes=m), 1.0) for u, m in zip(users, at, strict=True)]

    def run(job: str, order: list[int]) -> list[tuple[Any, ...]]:
        df = spark.createDataFrame(
            [rows[i] for i in order], "user_id string, ts timestamp, amount double"
        )
        result = keyed_process(
            df, key="user_id", function=Reminders(), output_schema=REMINDER_OUT, job=job,
            checkpoint_id=1, parallelism=1, event_time="ts", processing_time=ManualTimeProvider(T0),
        )  # fmt: skip
        return [tuple(r) for r in result.output.collect()]

    out = run("ordered", [4, 2, 0, 3, 1])
    minute = lambda t: (t - int(DAY.timestamp() * 1000)) // MINUTE  # noqa: E731
    sequence = [(r[0], r[1], minute(r[2]), r[3]) for r in out]
    # Reminders yields (user, what, at, count before, amounts): a timer's count is what it saw.
    assert sequence == [
        ("u0", "event", 0, None),
        ("u1", "event", 3, None),
        ("u2", "event", 11, None),
        ("u0", "timer", 10, 1),  # the watermark 11 min - 1 ms passed it: before u0's next record
        ("u0", "event", 12, 1),
        ("u1", "event", 30, 1),
        ("u1", "timer", 13, 2),  # then every reminder up to 30 min - 1 ms, earliest first
        ("u2", "timer", 21, 1),
        ("u0", "timer", 22, 2),
    ]
    assert run("again", [1, 3, 0, 2, 4]) == out  # another input order: the same run
