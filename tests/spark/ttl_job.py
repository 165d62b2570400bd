"""A small job with TTL state: the last visit of a user (value, TTL), the pages seen (list, TTL)
and the visit count (no TTL)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.spark import KeyedRun, keyed_process
from statecore.ttl import StateTtlConfig, TtlTimeProvider

TTL = timedelta(hours=2)
OUTPUT = T.StructType(
    [T.StructField("user", T.StringType()), T.StructField("visits", T.LongType())]
)


class Sessions(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        ttl = StateTtlConfig(ttl=TTL)
        self.last_page = ctx.get_state(ValueStateDescriptor("last_page", str, ttl=ttl))
        self.pages = ctx.get_list_state(ListStateDescriptor("pages", str, ttl=ttl))
        self.visits = ctx.get_state(ValueStateDescriptor("visits", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Any:
        self.last_page.update(value.page)
        self.pages.add(value.page)
        self.visits.update(self.visits.value() + 1)
        yield ctx.current_key, self.visits.value()


def visits(spark: SparkSession, users: list[str], page: str) -> DataFrame:
    return spark.createDataFrame([(u, page) for u in users], "user string, page string")


def run(
    spark: SparkSession,
    events: DataFrame,
    *,
    checkpoint_id: int,
    config: StatecoreConfig,
    clock: TtlTimeProvider,
) -> KeyedRun:
    result = keyed_process(
        events,
        key="user",
        function=Sessions(),
        output_schema=OUTPUT,
        job="sessions",
        checkpoint_id=checkpoint_id,
        parallelism=2,
        order_by=["page"],
        config=config,
        processing_time=clock,
    )
    result.unpersist()
    return result
