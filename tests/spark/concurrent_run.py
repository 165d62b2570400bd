"""One run of a small keyed job in a process of its own (its own local Spark), for the
concurrency tests: ``python -m tests.spark.concurrent_run SPEC_JSON``.

The spec names the checkpoint id, the rows (key, n), the output table, and optionally a gate
file the function waits for before its first record (so the test can act while the run holds
the job) and ``die_before_complete`` (the process exits before the catalog completes the
checkpoint, as a killed driver would). The statecore config comes from the environment.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.spark.session import build_session

OUTPUT = T.StructType([T.StructField("key", T.StringType()), T.StructField("total", T.LongType())])


class GatedSum(KeyedProcessFunction):
    """The running sum of ``n`` per key; waits for ``gate`` (when set) before its first record."""

    def __init__(self, gate: str | None) -> None:
        self.gate = gate

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total", int, default=0))
        deadline = time.monotonic() + 180
        while self.gate and not Path(self.gate).exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    def process_element(self, value: Any, ctx: Context) -> Any:
        total = self.total.value() + value.n
        self.total.update(total)
        yield (ctx.current_key, total)


def run(spark: SparkSession, spec: dict[str, Any], **options: Any) -> Any:
    from statecore.spark import keyed_process

    df = spark.createDataFrame([tuple(r) for r in spec["rows"]], "key string, n long")
    return keyed_process(
        df,
        key="key",
        function=GatedSum(spec.get("gate")),
        output_schema=OUTPUT,
        job=spec["job"],
        checkpoint_id=spec["checkpoint_id"],
        parallelism=1,
        output_table=spec["output_table"],
        **options,
    )


def main() -> None:
    spec = json.loads(sys.argv[1])
    if spec.get("die_before_complete"):
        from statecore.catalog import Catalog

        def die(*args: Any, **kwargs: Any) -> Any:
            os._exit(17)

        Catalog.complete_checkpoint = die  # type: ignore[method-assign]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = build_session(
        master="local[1]",
        app_name="statecore-concurrent-run",
        config={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"},
        log_level="ERROR",
    )
    result = run(spark, spec)
    print(json.dumps({"checkpoint": result.checkpoint.checkpoint_id}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
