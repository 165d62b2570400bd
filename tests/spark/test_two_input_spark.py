"""Two inputs on a real Spark: keyed_co_process as one keyed input with a tag, the
docs/two-inputs.md example run as written, its state restored by the next checkpoint."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from statecore.config import StatecoreConfig
from statecore.errors import ConfigError

pytestmark = pytest.mark.spark

PAGE = Path(__file__).resolve().parents[2] / "docs" / "two-inputs.md"


def page_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def test_two_input_docs_example_enriches_clicks_on_spark(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    harness_block, spark_block = page_blocks()[:2]
    scope: dict[str, Any] = {"spark": spark, "__name__": "two_inputs_doc"}
    exec(harness_block, scope)  # defines EnrichClicks (and checks it in the harness)
    exec(spark_block, scope)
    printed = capsys.readouterr().out
    assert printed.strip() == (
        "[Row(user='ann', page='/', tier='unknown'), Row(user='ann', page='/cart', "
        "tier='gold'), Row(user='bob', page='/', tier='silver')]"
    )
    # The next checkpoint restores the state both inputs wrote: bob's tier from checkpoint 1,
    # on the other backend; ann's new profile (second input) precedes her click in event time.
    from statecore.spark import keyed_co_process

    clicks = spark.createDataFrame(
        [("bob", "/help", 5_000), ("ann", "/", 7_000)], "user string, page string, ts long"
    )
    profiles = spark.createDataFrame(
        [("ann", "platinum", 6_000)], "user string, tier string, updated long"
    )
    run = keyed_co_process(
        clicks,
        profiles,
        key="user",
        event_time=("ts", "updated"),
        function=scope["EnrichClicks"](),
        output_schema=scope["run"].output.schema,
        job="enrich_clicks",
        checkpoint_id=2,
        backend="rocksdb",
        parallelism=1,
    )
    assert sorted(tuple(r) for r in run.output.collect()) == [
        ("ann", "/", "platinum"),
        ("bob", "/help", "silver"),
    ]
    run.unpersist()


def test_two_input_spark_refuses_keys_of_different_types(spark: Any) -> None:
    from statecore.spark.co_process import tagged_inputs

    first = spark.createDataFrame([("ann", 1)], "user string, n long")
    second = spark.createDataFrame([(1, "x")], "user_id long, v string")
    with pytest.raises(ConfigError, match="keys differ in type"):
        tagged_inputs(first, second, key=("user", "user_id"))
    with pytest.raises(ConfigError, match="input 2 has no column"):
        tagged_inputs(first, second, key="user")


def test_two_input_broadcast_pattern_on_spark_every_task_gets_the_rules(
    spark: Any, statecore_home: StatecoreConfig
) -> None:
    """The limit reaches both tasks (users of both key-group ranges alert), and the next
    checkpoint restores it from the broadcast state without a broadcast element."""
    from pyspark.sql import types as T

    from statecore import KeyedBroadcastProcessFunction, MapStateDescriptor, ValueStateDescriptor
    from statecore.keygroups import assign_to_key_group, compute_operator_index_for_key_group
    from statecore.spark.co_process import instance_keys, keyed_broadcast_process

    limits = MapStateDescriptor("limits", str, int)

    class OverLimit(KeyedBroadcastProcessFunction):
        def open(self, ctx: Any) -> None:
            self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

        def process_element(self, payment: Any, ctx: Any) -> Any:
            self.total.update(self.total.value() + payment.amount)
            limit = ctx.get_broadcast_state(limits).get("max")
            if limit is not None and self.total.value() > limit:
                yield payment.user, self.total.value()

        def process_broadcast_element(self, rule: Any, ctx: Any) -> None:
            ctx.get_broadcast_state(limits).put("max", rule.limit)

    users = [f"user-{i}" for i in range(8)]
    tasks = {
        compute_operator_index_for_key_group(128, 2, assign_to_key_group(u, 128)) for u in users
    }
    assert tasks == {0, 1}  # the users live in both tasks
    keys = instance_keys(T.StringType(), 2, 128)
    assert [
        compute_operator_index_for_key_group(128, 2, assign_to_key_group(k, 128)) for k in keys
    ] == [0, 1]
    schema = "user string, amount long, ts long"
    rules_schema = "limit long, ts long"
    out = T.StructType(
        [T.StructField("user", T.StringType()), T.StructField("total", T.LongType())]
    )
    common = dict(
        key="user",
        function=OverLimit(),
        states=[limits],
        output_schema=out,
        job="limits",
        parallelism=2,
        max_parallelism=128,
        event_time="ts",
    )
    payments = spark.createDataFrame([(u, 60, 10) for u in users], schema)
    rules = spark.createDataFrame([(50, 1)], rules_schema)
    run = keyed_broadcast_process(payments, rules, checkpoint_id=1, **common)
    assert sorted(tuple(r) for r in run.output.collect()) == [(u, 60) for u in users]
    run.unpersist()
    payments = spark.createDataFrame([(u, 1, 20) for u in users[:2]], schema)
    run = keyed_broadcast_process(
        payments, spark.createDataFrame([], rules_schema), checkpoint_id=2, **common
    )
    assert sorted(tuple(r) for r in run.output.collect()) == [(u, 61) for u in users[:2]]
    run.unpersist()
