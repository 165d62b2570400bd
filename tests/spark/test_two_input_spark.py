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
    harness_block, spark_block = page_blocks()
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
