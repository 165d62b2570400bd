"""A long stream of small micro-batches stays bounded: 300 checkpoints in-process (the driver and
task steps of ``keyed_process`` on real Delta tables and a real catalog, without Spark).

Asserted on structural proxies, not on wall time: the catalog's checkpoint rows stay below a
bound (the run's retention), every table (keyed, operator, timers and output) keeps a recent Delta
log checkpoint so opening it replays at most ``LOG_CHECKPOINT_INTERVAL`` commits, and each
micro-batch's commit writes as many rows at the end as at the beginning. The CPU time per
micro-batch of the first and last 50 is compared only loosely, as a second check (this
process's CPU time: the wall clock moves with the load of ``make test``'s other groups).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from statecore.catalog import Catalog, CheckpointRecord, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, ValueStateDescriptor
from statecore.errors import CheckpointOrderError
from statecore.runtime import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    OnTimerContext,
)
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL, log_replay_length
from statecore.snapshot.output import OutputTable, OutputWriter
from statecore.snapshot.rewrite import table_files
from tests.inprocess import run_checkpoint

MICRO_BATCHES = 300
RETAIN = 10
KEYS = 24
PER_BATCH = 4
OUTPUT = pa.schema([("key", pa.string()), ("count", pa.int64())])


class CountWithTimeout(KeyedProcessFunction, CheckpointedFunction):
    """Counts events per key (keyed state), events per subtask (operator state), and emits -1
    for a key once the watermark passes its last event by 50 (an event-time timer)."""

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.count = context.keyed_state_store.get_state(
            ValueStateDescriptor("count", int, default=0)
        )
        self.seen = context.operator_state_store.get_list_state(ListStateDescriptor("seen", int))
        self.events = 0

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[str, int]]:
        self.count.update(self.count.value() + 1)
        self.events += 1
        ctx.timer_service.register_event_time_timer(value + 50)
        yield ctx.current_key, self.count.value()

    def on_timer(self, timestamp: int, ctx: OnTimerContext) -> Iterator[tuple[str, int]]:
        yield ctx.current_key, -1

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        self.seen.update([self.events])


def micro_batch(i: int) -> list[tuple[str, int]]:
    """Micro-batch ``i`` (from 0): every key once at first, then ``PER_BATCH`` of them."""
    if i == 0:
        return [(f"u{k}", 0) for k in range(KEYS)]
    return [(f"u{(i * 37 + j) % KEYS}", i * 10) for j in range(PER_BATCH)]


def commit_output(uri: str, rows: list[tuple[str, int]], checkpoint_id: int) -> None:
    writer = OutputWriter(uri, OUTPUT, checkpoint_id=checkpoint_id, subtask=0)
    writer.write(pa.RecordBatch.from_pylist([{"key": k, "count": c} for k, c in rows], OUTPUT))
    written = writer.close()
    OutputTable(uri, OUTPUT, app_id="statecore:stream/main").commit(
        [] if written is None else [written], checkpoint_id=checkpoint_id
    )


def run_micro_batch(
    config: StatecoreConfig, catalog: Catalog, job: str, i: int, **options: Any
) -> tuple[list[Any], CheckpointRecord]:
    """Micro-batch ``i`` of the long stream (its events, its watermark) as checkpoint ``i`` of
    ``job``, in process; ``options`` are ``run_checkpoint``'s others (changelog, retention)."""
    return run_checkpoint(
        config,
        CountWithTimeout(),
        micro_batch(i),
        job=job,
        checkpoint_id=i,
        watermark=i * 10 - 20,
        catalog=catalog,
        **options,
    )


def written_rows(uri: str, version: int) -> int:
    """Rows of the files the commit of ``version`` added."""
    before = {f.path for f in table_files(uri, version - 1)}
    return sum(f.rows for f in table_files(uri, version) if f.path not in before)


@pytest.mark.slow
def test_a_stream_of_300_micro_batches_stays_bounded(statecore_home: StatecoreConfig) -> None:
    output_uri = f"{statecore_home.warehouse}/stream_out"
    catalog_rows, replays, rows_written, seconds = [], [], [], []
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        for i in range(MICRO_BATCHES):
            started = time.process_time()
            out, record = run_micro_batch(
                statecore_home, catalog, "stream", i, retain_checkpoints=RETAIN
            )
            commit_output(output_uri, out, i)
            seconds.append(time.process_time() - started)
            catalog_rows.append(len(catalog.list_checkpoints("stream", with_tables=False)))
            uris = [t.path for t in record.tables] + [output_uri]
            replays.append(max(log_replay_length(uri) for uri in uris))
            if 0 < i <= 50 or i >= MICRO_BATCHES - 50:  # compared: the first and last 50
                rows_written.append(
                    sum(written_rows(t.path, t.version) for t in record.tables if t.version > 0)
                )
    assert {t.table_kind for t in record.tables} == {"keyed", "operator", "timers"}

    # the catalog: the last RETAIN completed, at most RETAIN expired rows
    assert max(catalog_rows) <= 2 * RETAIN
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        rows = catalog.list_checkpoints("stream")
        completed = [c.checkpoint_id for c in rows if c.status == CheckpointStatus.COMPLETED]
        assert completed == list(range(MICRO_BATCHES - RETAIN, MICRO_BATCHES))
        expired = [c.checkpoint_id for c in rows if c.status == CheckpointStatus.EXPIRED]
        assert expired == list(range(MICRO_BATCHES - 2 * RETAIN, MICRO_BATCHES - RETAIN))
    # every table opens from a recent log checkpoint
    assert max(replays) <= LOG_CHECKPOINT_INTERVAL
    # the work per micro-batch follows the micro-batch, not the stream's length
    first, last = rows_written[:50], rows_written[-50:]
    assert statistics.mean(last) <= 1.25 * statistics.mean(first), (first, last)
    # secondary, loose: no growth in time per micro-batch, in this process's CPU time (the wall
    # clock of a shared machine moves with the other processes' load: make test's other groups)
    ratio = statistics.median(seconds[-50:]) / statistics.median(seconds[1:51])
    assert ratio <= 2, f"CPU time per micro-batch, last 50 / first 50: {ratio:.2f}"  # 1.2 here

    # a retained id replays as a no-op, an expired one too, a deleted one is refused loudly
    _, replayed = run_checkpoint(
        statecore_home, CountWithTimeout(), [], job="stream", checkpoint_id=MICRO_BATCHES - 1
    )
    assert replayed.status == CheckpointStatus.COMPLETED
    _, replayed = run_checkpoint(
        statecore_home, CountWithTimeout(), [], job="stream", checkpoint_id=expired[0]
    )
    assert replayed.status == CheckpointStatus.EXPIRED
    try:
        run_checkpoint(statecore_home, CountWithTimeout(), [], job="stream", checkpoint_id=5)
    except CheckpointOrderError as exc:
        assert "checkpoint 5 of job 'stream'" in str(exc)
    else:
        raise AssertionError("a deleted checkpoint id must not replay silently")
