"""``non_keyed_process`` on a real Spark: a ``ProcessFunction`` over a DataFrame without a key,
each row its own key (its position), as docs/jobs.md ("Without a key") runs it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from statecore.config import StatecoreConfig
from statecore.errors import ConfigError

pytestmark = pytest.mark.spark

PAGE = Path(__file__).resolve().parents[2] / "docs" / "jobs.md"


def section_blocks() -> list[str]:
    section = PAGE.read_text().split("## Without a key", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_rich_function_non_keyed_process_docs_example_on_spark(
    spark: Any, statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    harness_block, spark_block = section_blocks()[:2]
    scope: dict[str, Any] = {"spark": spark, "__name__": "non_keyed_doc"}
    exec(harness_block, scope)  # defines LargeOrders (and checks it in the harness)
    exec(spark_block, scope)
    printed = capsys.readouterr().out.strip()
    rows = eval(printed)  # the printed list of tuples
    assert [row[:3] for row in rows] == [("o2", 250, 2000), ("o4", 120, 3500)]
    assert {row[3] for row in rows} <= {0, 1}
    from statecore.spark import non_keyed_process

    with pytest.raises(ConfigError, match="takes no key column"):
        non_keyed_process(
            scope["orders"],
            key="id",
            function=scope["LargeOrders"](),
            output_schema=scope["run"].output.schema,
            job="large_orders",
            checkpoint_id=2,
        )
    with pytest.raises(ConfigError, match=r"no column \['when'\]"):
        non_keyed_process(
            scope["orders"],
            function=scope["LargeOrders"](),
            output_schema=scope["run"].output.schema,
            job="large_orders",
            checkpoint_id=2,
            order_by=["when"],
        )
