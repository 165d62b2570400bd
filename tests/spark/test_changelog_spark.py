"""Changelog checkpoints through Spark: a checkpoint that changes 1% of the keys writes about 1%
of the state's bytes (the run without changelog rewrites every key group it touched: all)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import types as T

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.query import run_sql
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.snapshot.changelog import ChangelogConfig
from statecore.spark import keyed_process

pytestmark = pytest.mark.spark

KEYS = 40_000
OUT = T.StructType([T.StructField("k", T.StringType())])


class Sum(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> None:
        self.total.update(self.total.value() + value.n)


def _bytes(
    config: StatecoreConfig, changelog: bool | ChangelogConfig, spark: Any
) -> tuple[int, int]:
    """Bytes the second checkpoint (1% of the keys changed) wrote and the state's bytes after
    the first; the state is checked."""
    # hex keys: state that does not compress away, so bytes follow rows
    everyone = spark.range(KEYS).selectExpr("sha2(CAST(id AS STRING), 256) AS k", "1 AS n")
    one_percent = spark.range(0, KEYS, 100).selectExpr(
        "sha2(CAST(id AS STRING), 256) AS k", "2 AS n"
    )
    common: dict[str, Any] = {
        "key": "k",
        "function": Sum(),
        "output_schema": OUT,
        "job": "sums",
        "parallelism": 2,
        "max_parallelism": 4,
        "config": config,
        "changelog": changelog,
    }
    keyed_process(everyone, checkpoint_id=1, **common).unpersist()
    keyed_process(one_percent, checkpoint_id=2, **common).unpersist()
    with Catalog.connect(config.catalog_url) as catalog:
        first = {(t.table_kind, t.state): t for t in catalog.get_checkpoint("sums", 1).tables}
        second = {(t.table_kind, t.state): t for t in catalog.get_checkpoint("sums", 2).tables}
        totals = run_sql(catalog, "SELECT sum(value) AS s, count(*) AS n FROM sums.total")
        assert totals.to_pylist() == [{"s": KEYS + 2 * KEYS // 100, "n": KEYS}]
    state = first["keyed", "total"]
    written = second["keyed", "total"].version > state.version and second["keyed", "total"].bytes
    changes = second.get(("changes", "total"))
    return int(written or 0) + (changes.bytes if changes else 0), state.bytes


def test_changelog_one_percent_change_writes_about_one_percent(spark: Any, tmp_path: Any) -> None:
    plain = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "plain")})
    logged = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "logged")})
    whole, state = _bytes(plain, False, spark)
    changed, _ = _bytes(logged, True, spark)
    assert whole >= 0.9 * state  # every key group touched: rewritten whole
    assert changed <= 0.03 * state, (changed, state)  # 1% of the keys: ~1% (+ file footers)
