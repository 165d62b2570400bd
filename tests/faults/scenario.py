"""The job every fault test runs, its input per checkpoint, and how its outcome is read back.

The job keeps, per user, a running ``total`` (ValueState) and the ``seqs`` of its events in order
(ListState), and per subtask the records it ``processed`` per checkpoint (operator ListState), and
appends one output row per event (user, seq, amount, running total) to a Delta output table. An
update lost or applied twice shows in every one of them: a total off by an amount, a seq missing
or twice in a list, a processed count off, an output row missing, doubled or with another running
total. The per-record and the vectorized function keep the same state, so their runs compare.

Outcomes are read back by second readers: the state through ``statecore.query`` (DuckDB over the
checkpoint's Delta versions), the output table with DuckDB's ``delta_scan``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import types as T

from statecore import errors
from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, ValueStateDescriptor
from statecore.query import open_views
from statecore.query.sql import connect
from statecore.runtime import Context, KeyedProcessFunction, OutputTag, RuntimeContext
from statecore.runtime.functions import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
)
from statecore.snapshot.changelog import ChangelogConfig
from statecore.snapshot.commits import head_version
from statecore.spark import SideOutput, keyed_process, keyed_process_batches
from statecore.vectorized import KeyedBatch, KeyedBatchFunction

JOB = "faults"
EVENTS_PER_CHECKPOINT = 240
USERS = 23
ARROW_BATCH_ROWS = 40  # several batches per task, so `task:process:<n>` lands mid-task
CHECKPOINTS = (1, 2, 3)

TOTAL = ValueStateDescriptor("total", int, default=0)
SEQS = ListStateDescriptor("seqs", int)
PROCESSED = ListStateDescriptor("processed", int)
INPUT = "user string, seq bigint, amount bigint"
OUTPUT = T.StructType(
    [
        T.StructField("user", T.StringType()),
        T.StructField("seq", T.LongType()),
        T.StructField("amount", T.LongType()),
        T.StructField("running", T.LongType()),
    ]
)
APIS = ("record", "vector")
SIDE_API = "side"
"""The per-record function that also emits its big amounts to a side output (:data:`BIG`)."""
BIG = OutputTag("big")
BIG_AMOUNT = 40
BIG_SCHEMA = T.StructType(
    [T.StructField("user", T.StringType()), T.StructField("seq", T.LongType())]
)
BACKENDS = ("heap", "rocksdb", "heap+changelog", "rocksdb+changelog")
"""``+changelog``: changelog checkpoints (checkpoint 2 writes change files, 3 materializes)."""
CHANGELOG = ChangelogConfig(materialize_every=2, max_change_ratio=100.0)

_RETRYABLE = tuple(
    cls
    for cls in (getattr(errors, "ConcurrentRunError", None), errors.MaintenanceLockedError)
    if isinstance(cls, type)
)
"""What a recovery run may meet while the dead run's lease has not expired yet."""


def events(checkpoint_id: int) -> pd.DataFrame:
    """The input of ``checkpoint_id``: the same rows in every run."""
    seqs = range(checkpoint_id * 1000, checkpoint_id * 1000 + EVENTS_PER_CHECKPOINT)
    return pd.DataFrame(
        {
            "user": [f"u{(s * 7) % USERS}" for s in seqs],
            "seq": list(seqs),
            "amount": [(s * 13) % 50 + 1 for s in seqs],
        }
    )


class _Processed(CheckpointedFunction):
    """Per subtask, the records processed in each checkpoint (split operator list state)."""

    records = 0

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.processed = context.operator_state_store.get_list_state(PROCESSED)
        self.records = 0

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        self.processed.add(self.records)
        self.records = 0


class PerRecord(KeyedProcessFunction, _Processed):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(TOTAL)
        self.seqs = ctx.get_list_state(SEQS)

    def process_element(self, value: Any, ctx: Context) -> Any:
        self.records += 1
        total = self.total.value() + value.amount
        self.total.update(total)
        self.seqs.add(value.seq)
        yield ctx.current_key, value.seq, value.amount, total


class PerRecordSide(PerRecord):
    """:class:`PerRecord`, and each event of an amount above :data:`BIG_AMOUNT` to ``big``."""

    def process_element(self, value: Any, ctx: Context) -> Any:
        if value.amount > BIG_AMOUNT:
            ctx.output(BIG, (ctx.current_key, value.seq))
        return super().process_element(value, ctx)


class Vectorized(KeyedBatchFunction, _Processed):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(TOTAL)
        self.seqs = ctx.get_list_state(SEQS)

    def process_batch(self, batch: KeyedBatch) -> pa.Table:
        self.records += batch.num_rows
        amounts = batch.rows.column("amount").to_pylist()
        seqs = batch.rows.column("seq").to_pylist()
        totals = batch.values(self.total)
        running = []
        by_key: list[list[int]] = [[] for _ in batch.keys]
        for code, amount, seq in zip(batch.codes.tolist(), amounts, seqs):
            totals[code] += amount
            running.append(totals[code])
            by_key[code].append(seq)
        batch.update(self.total, totals)
        for i in batch.each_key():
            self.seqs.add_all(by_key[i])
        return batch.rows.append_column("running", pa.array(running, pa.int64()))


def run_checkpoint(
    spark: Any,
    config: StatecoreConfig,
    *,
    api: str,
    backend: str,
    checkpoint_id: int,
    retry_for: float = 0.0,
) -> Any:
    """One checkpoint of the job; with ``retry_for`` seconds, retried while the job is still
    held by a run that died (its lease has not expired yet)."""
    df = spark.createDataFrame(events(checkpoint_id), INPUT)
    common: dict[str, Any] = {
        "key": "user",
        "output_schema": OUTPUT,
        "job": JOB,
        "checkpoint_id": checkpoint_id,
        "parallelism": 2,
        "order_by": ["seq"],
        "backend": backend.removesuffix("+changelog"),
        "config": config,
        "output_table": output_table(config),
        "changelog": CHANGELOG if backend.endswith("+changelog") else False,
    }
    run: Callable[[], Any]
    if api == "record":
        run = lambda: keyed_process(df, function=PerRecord(), **common)  # noqa: E731
    elif api == SIDE_API:
        side = {BIG: SideOutput(table=side_table(config), schema=BIG_SCHEMA)}
        run = lambda: keyed_process(  # noqa: E731
            df, function=PerRecordSide(), side_outputs=side, **common
        )
    else:
        run = lambda: keyed_process_batches(  # noqa: E731
            df, function=Vectorized(), batch_rows=ARROW_BATCH_ROWS, **common
        )
    deadline = time.monotonic() + retry_for
    while True:
        try:
            return run()
        except _RETRYABLE:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def output_table(config: StatecoreConfig) -> str:
    """The job's output table: in the home, or beside a warehouse on an object store."""
    if "://" in config.warehouse:
        return f"{config.warehouse.rstrip('/')}-output"
    return f"{config.home}/output"


def side_table(config: StatecoreConfig) -> str:
    """The side output table of the :data:`SIDE_API` job, beside its output table."""
    return f"{output_table(config)}-big"


def read_side(config: StatecoreConfig) -> list[tuple[str, int]]:
    """The side output table's rows, read with DuckDB (none before its first commit)."""
    if head_version(side_table(config)) is None:
        return []
    con = connect()
    try:
        rows = con.execute(f"SELECT user, seq FROM delta_scan('{side_table(config)}')").fetchall()
    finally:
        con.close()
    return sorted(rows)


def expected_side(checkpoints: tuple[int, ...]) -> list[tuple[str, int]]:
    """The big events of ``checkpoints``, computed with pandas from the input alone."""
    frame = pd.concat([events(c) for c in checkpoints], ignore_index=True)
    big = frame[frame["amount"] > BIG_AMOUNT]
    return sorted((u, int(s)) for u, s in zip(big["user"], big["seq"]))


@dataclass(frozen=True)
class Outcome:
    """What a sequence of checkpoints left: state, output rows and checkpoint statuses."""

    total: dict[str, int]
    seqs: dict[str, list[int]]
    processed: int
    output: list[tuple[str, int, int, int]]
    statuses: dict[int, str]


def read_outcome(config: StatecoreConfig) -> Outcome:
    with Catalog.connect(config.catalog_url) as catalog:
        statuses = {c.checkpoint_id: c.status.name for c in catalog.list_checkpoints(JOB)}
        views = open_views(catalog, jobs=[JOB])
        try:
            total = views.sql(f"SELECT key, value FROM {JOB}.total").to_pylist()
            seqs = views.sql(f"SELECT key, value FROM {JOB}.seqs").to_pylist()
            processed = views.sql(f"SELECT value FROM {JOB}.processed").to_pylist()
        finally:
            views.close()
    rows = []  # no table yet: the first checkpoint's output is still pending (or none ran)
    if head_version(output_table(config)) is not None:
        con = connect()  # DuckDB with the Delta extension (and S3's settings, if any)
        try:
            rows = con.execute(
                f"SELECT user, seq, amount, running FROM delta_scan('{output_table(config)}')"
            ).fetchall()
        finally:
            con.close()
    return Outcome(
        total={r["key"]: r["value"] for r in total},
        seqs={r["key"]: r["value"] for r in seqs},
        processed=sum(_flatten(r["value"]) for r in processed),
        output=sorted(rows),
        statuses=statuses,
    )


def _flatten(value: Any) -> int:
    return sum(value) if isinstance(value, list) else int(value)


def expected_outcome(checkpoints: tuple[int, ...] = CHECKPOINTS) -> Outcome:
    """The outcome computed with pandas from the input alone."""
    frame = pd.concat([events(c) for c in checkpoints], ignore_index=True).sort_values("seq")
    frame["running"] = frame.groupby("user")["amount"].cumsum()
    return Outcome(
        total={u: int(v) for u, v in frame.groupby("user")["amount"].sum().items()},
        seqs={u: [int(s) for s in v] for u, v in frame.groupby("user")["seq"]},
        processed=len(frame),
        output=sorted(
            (u, int(s), int(a), int(r))
            for u, s, a, r in zip(frame["user"], frame["seq"], frame["amount"], frame["running"])
        ),
        statuses={c: CheckpointStatus.COMPLETED.name for c in checkpoints},
    )


def differences(actual: Outcome, expected: Outcome) -> list[str]:
    """What was lost or doubled, in words (empty when the outcomes agree)."""
    found = []
    for user in sorted(set(actual.total) | set(expected.total)):
        got, want = actual.total.get(user), expected.total.get(user)
        if got != want:
            found.append(f"total[{user}] = {got}, expected {want}")
        got_seqs, want_seqs = actual.seqs.get(user, []), expected.seqs.get(user, [])
        if got_seqs != want_seqs:
            lost = sorted(set(want_seqs) - set(got_seqs))
            doubled = sorted({s for s in got_seqs if got_seqs.count(s) > 1})
            found.append(f"seqs[{user}]: lost {lost}, doubled {doubled}")
    if actual.processed != expected.processed:
        found.append(f"processed {actual.processed}, expected {expected.processed}")
    got_rows, want_rows = pd.Series(actual.output), pd.Series(expected.output)
    if actual.output != expected.output:
        lost_rows = sorted(set(expected.output) - set(actual.output))
        extra = sorted(set(actual.output) - set(expected.output))
        dup = sorted(got_rows[got_rows.duplicated()].tolist())
        found.append(
            f"output: {len(actual.output)} rows, expected {len(want_rows)}; lost {lost_rows[:5]}, "
            f"unexpected {extra[:5]}, doubled {dup[:5]}"
        )
    if actual.statuses != expected.statuses:
        found.append(f"checkpoints {actual.statuses}, expected {expected.statuses}")
    return found
