"""The stream of the stream tests, in a process of its own for the driver-kill test:
``python -m tests.spark.stream_job SPEC_JSON`` (the spec names the input folder, the checkpoint
location and the output table; the statecore config and the kill point come from the
environment). The query reads every file there is (``availableNow``), one file per micro-batch.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, OnTimerContext, RuntimeContext
from statecore.snapshot.faults import FAULT_PID_ENV
from statecore.spark.session import build_session

INPUT = "user string, ts long, amount long"
OUTPUT = T.StructType(
    [
        T.StructField("user", T.StringType()),
        T.StructField("what", T.StringType()),
        T.StructField("at", T.LongType()),
        T.StructField("total", T.LongType()),
        T.StructField("watermark", T.LongType()),
    ]
)
REMIND_AFTER = 10_000


class Reminders(KeyedProcessFunction):
    """Per user: the running total of ``amount``, and an event-time timer ``REMIND_AFTER`` ms
    after each event that reports the total."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        total = self.total.value() + value.amount
        self.total.update(total)
        ctx.timer_service.register_event_time_timer(value.ts + REMIND_AFTER)
        yield ctx.current_key, "event", value.ts, total, ctx.timer_service.current_watermark()

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[Any, ...]]:
        watermark = ctx.timer_service.current_watermark()
        yield ctx.current_key, "timer", timestamp, self.total.value(), watermark


def start(spark: SparkSession, spec: dict[str, Any], **options: Any) -> Any:
    from statecore.spark import keyed_stream

    stream = spark.readStream.schema(INPUT).option("maxFilesPerTrigger", 1).json(spec["input"])
    return keyed_stream(
        stream,
        key="user",
        function=Reminders(),
        output_schema=OUTPUT,
        job=spec["job"],
        checkpoint_location=spec["checkpoint_location"],
        output_table=spec["output_table"],
        event_time="ts",
        parallelism=1,
        **options,
    )


def main() -> None:
    spec = json.loads(sys.argv[1])
    os.environ[FAULT_PID_ENV] = str(os.getpid())  # a kill point in a task kills this driver
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = build_session(
        master="local[1]",
        app_name="statecore-stream-job",
        config={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"},
        log_level="ERROR",
    )
    start(spark, spec, trigger={"availableNow": True}).awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
