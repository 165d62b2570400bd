"""The clickstream job: per-user running state over daily event partitions.

Submitted with ``spark-submit jobs/clickstream.py --date 2026-01-02`` (the Airflow DAG
``stateful_pipeline`` does this once per logical date). Each run restores the previous day's
checkpoint, processes the day and writes a new checkpoint plus the day's enriched events.

States per user, one of each kind:
  total_amount  ValueState       running total spent
  last_events   ListState        the last 5 event types
  event_counts  MapState         events per event type
  max_amount    ReducingState    the largest amount
  avg_amount    AggregatingState the average amount (sum and count accumulator)

Operator state (``CheckpointedFunction``), per parallel instance:
  processed     split ListState  per checkpoint, the events this instance processed; split
                                 over the instances when the job is rescaled
  rules         BroadcastState   the amount from which an event of a type is flagged
                                 (``--rules '{"purchase": 150}'`` replaces them on every instance)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Iterator, Mapping
from datetime import date, timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from statecore.backends import BackendParameters, backend_names
from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statecore.ops.runs import check_day_order
from statecore.runtime import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    RuntimeContext,
)
from statecore.spark import KeyedRun, keyed_process
from statecore.spark.session import build_session

JOB = "clickstream"
LAST_N = 5

OUTPUT_SCHEMA = T.StructType(
    [
        T.StructField("user_id", T.StringType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("event_type", T.StringType()),
        T.StructField("amount", T.DoubleType()),
        T.StructField("total_amount", T.DoubleType()),
        T.StructField("max_amount", T.DoubleType()),
        T.StructField("avg_amount", T.DoubleType()),
        T.StructField("events_of_type", T.LongType()),
        T.StructField("last_events", T.StringType()),
        T.StructField("flagged", T.BooleanType()),
    ]
)

DEFAULT_RULES = {"purchase": 150.0, "add_to_cart": 190.0}
PROCESSED = pa.struct([("checkpoint_id", pa.int64()), ("events", pa.int64())])

AVG_ACCUMULATOR = pa.struct([("sum", pa.float64()), ("count", pa.int64())])


class Average(AggregateFunction[float, dict[str, Any], float]):
    def create_accumulator(self) -> dict[str, Any]:
        return {"sum": 0.0, "count": 0}

    def add(self, value: float, accumulator: dict[str, Any]) -> dict[str, Any]:
        return {"sum": accumulator["sum"] + value, "count": accumulator["count"] + 1}

    def get_result(self, accumulator: dict[str, Any]) -> float:
        return float(accumulator["sum"] / accumulator["count"])

    def merge(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {"sum": a["sum"] + b["sum"], "count": a["count"] + b["count"]}


class UserActivity(KeyedProcessFunction, CheckpointedFunction):
    def __init__(self, rules: Mapping[str, float] | None = None) -> None:
        self.new_rules = dict(rules) if rules is not None else None

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        store = context.operator_state_store
        self.processed = store.get_list_state(ListStateDescriptor("processed", PROCESSED))
        self.rules = store.get_broadcast_state(MapStateDescriptor("rules", str, float))
        if self.new_rules is not None or self.rules.is_empty():
            self.rules.clear()
            self.rules.put_all(DEFAULT_RULES if self.new_rules is None else self.new_rules)
        self.events = 0

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total_amount", float, default=0.0))
        self.last_events = ctx.get_list_state(ListStateDescriptor("last_events", str))
        self.counts = ctx.get_map_state(MapStateDescriptor("event_counts", str, int))
        self.max_amount = ctx.get_reducing_state(ReducingStateDescriptor("max_amount", max, float))
        self.avg_amount = ctx.get_aggregating_state(
            AggregatingStateDescriptor("avg_amount", Average(), AVG_ACCUMULATOR)
        )

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        self.events += 1
        total = self.total.value() + value.amount
        self.total.update(total)
        last = self.last_events.get()
        last.append(value.event_type)
        self.last_events.update(last[-LAST_N:])
        count = (self.counts.get(value.event_type) or 0) + 1
        self.counts.put(value.event_type, count)
        self.max_amount.add(value.amount)
        self.avg_amount.add(value.amount)
        limit = self.rules.get(value.event_type)
        yield (
            ctx.current_key,
            value.ts,
            value.event_type,
            value.amount,
            total,
            self.max_amount.get(),
            self.avg_amount.get(),
            count,
            ",".join(last[-LAST_N:]),
            limit is not None and value.amount >= limit,
        )

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        if self.events:
            self.processed.add({"checkpoint_id": context.checkpoint_id, "events": self.events})
        self.events = 0


def run(
    spark: SparkSession,
    events: DataFrame,
    *,
    checkpoint_id: int,
    job: str = JOB,
    parallelism: int | None = None,
    max_parallelism: int | None = None,
    backend: str | BackendParameters = "heap",
    rules: Mapping[str, float] | None = None,
    backend_options: object = None,
    restore_from: str | None = None,
    force_restore: bool = False,
    config: StatecoreConfig | None = None,
    output_table: str | None = None,
) -> KeyedRun:
    """Process ``events`` as one checkpoint of ``job`` (``rules`` replace the flagging rules;
    ``backend`` is a name or ``BackendParameters``, ``backend_options`` configure a named
    backend, e.g. ``RocksDBOptions``; ``restore_from`` is a savepoint folder to start from,
    refused if older than the latest checkpoint unless ``force_restore``; ``output_table``: a
    Delta table the enriched events are committed to once the checkpoint completes)."""
    return keyed_process(
        events.select("user_id", "event_type", "amount", "ts"),
        key="user_id",
        function=UserActivity(rules),
        output_schema=OUTPUT_SCHEMA,
        job=job,
        checkpoint_id=checkpoint_id,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
        order_by=["ts", "event_type", "amount"],
        backend=backend,
        backend_options=backend_options,
        restore_from=restore_from,
        force_restore=force_restore,
        config=config,
        output_table=output_table,
    )


def _optional_int(text: str) -> int | None:
    """An int, or ``None`` for an empty argument (an unset Airflow param renders as '')."""
    return int(text) if text.strip() not in ("", "None") else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The job's arguments (the DAG renders them from its params)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--date", required=True, type=date.fromisoformat)
    parser.add_argument(
        "--input",
        help="folder of date=YYYY-MM-DD partitions (default: $STATECORE_INPUT, else "
        "$STATECORE_HOME/data/clickstream)",
    )
    parser.add_argument(
        "--output",
        help="folder for the enriched events (default: $STATECORE_HOME/output/clickstream)",
    )
    parser.add_argument(
        "--output-table",
        help="the Delta table the enriched events are committed to after each checkpoint "
        "completes, which a replay reads them back from (default: "
        "$STATECORE_HOME/output/<job>_events)",
    )
    parser.add_argument(
        "--parallelism",
        type=_optional_int,
        help="default: the job's current parallelism (set by a rescale)",
    )
    parser.add_argument("--max-parallelism", type=_optional_int)
    parser.add_argument(
        "--backend",
        default="heap",
        choices=backend_names(),
        help="keyed state backend (rocksdb keeps state on local disk)",
    )
    parser.add_argument(
        "--from-savepoint",
        default="",
        help="a savepoint (name or export folder) to start from instead of the latest checkpoint",
    )
    parser.add_argument("--job", default=JOB)
    parser.add_argument(
        "--lease-wait",
        type=float,
        help="seconds to wait for the job's lease when maintenance (or another run) holds it "
        "(default: $STATECORE_LEASE_WAIT, else 0: refused at once)",
    )
    parser.add_argument(
        "--rules",
        type=json.loads,
        help="flagging rules as JSON, e.g. '{\"purchase\": 150}' (default: keep)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    wait = None if args.lease_wait is None else timedelta(seconds=args.lease_wait)
    config = StatecoreConfig.resolve(lease_wait=wait)
    home = config.home
    args.input = args.input or os.environ.get("STATECORE_INPUT") or f"{home}/data/clickstream"
    args.output = args.output or f"{home}/output/clickstream"
    args.output_table = args.output_table or f"{home}/output/{args.job}_events"
    # statecore's lines at INFO, everything else (py4j's connection chatter) from WARNING
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("statecore").setLevel(logging.INFO)
    # days run in order, or not at all: refused before Spark starts when an earlier day would be
    # left out of the state for good (a failed day, or one with input and no checkpoint)
    with Catalog.connect(config.catalog_url) as catalog:
        check_day_order(catalog, job=args.job, day=args.date, input_root=args.input)
    spark = build_session(app_name=f"statecore-{args.job}")
    day = args.date.isoformat()
    events = spark.read.parquet(f"{args.input}/date={day}")
    result = run(
        spark,
        events,
        checkpoint_id=int(args.date.strftime("%Y%m%d")),
        job=args.job,
        parallelism=args.parallelism,
        max_parallelism=args.max_parallelism,
        backend=args.backend,
        rules=args.rules,
        restore_from=args.from_savepoint or None,
        config=config,
        output_table=args.output_table,
    )
    # The day's folder is written from the rows the output table holds for the checkpoint, on a
    # replay too: a run killed after its checkpoint completed, before it wrote the folder, is
    # retried as a replay, which must not leave the day without its events.
    result.output.write.mode("overwrite").parquet(f"{args.output}/date={day}")
    if result.replayed:
        print(f"checkpoint {result.checkpoint.checkpoint_id} already complete: nothing to do")
    else:
        print(
            f"{day}: {result.records} events, checkpoint {result.checkpoint.checkpoint_id} "
            f"complete with {result.checkpoint.total_rows} state rows"
        )
    spark.stop()


if __name__ == "__main__":
    main()
