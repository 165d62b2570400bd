"""Where a record's time goes on the per-record path, stage by stage (no Spark, no profiler).

    python -m benchmarks.breakdown --events 200000              # heap and RocksDB
    python -m benchmarks.breakdown --events 200000 --backend heap

Each stage is a cumulative run over the benchmark's Arrow batches (10,000 rows, key groups
computed beforehand as Spark does): every run does what the one before did plus one more part of
``KeyedOperatorTask.process_batch``, so the difference of two runs is what that part costs per
record. The runs are the real parts (the task, the backend, ``to_batch`` of the Spark runtime),
not copies:

1. **Arrow to Python values**: ``to_pylist`` of the key, key-group and value columns.
2. **records**: plus one record (namedtuple) per row, as the task builds them.
3. **key made current**: plus the backend's batch key setter per record (heap: two
   assignments; RocksDB: the key prefix too, built per batch for string keys).
4. **function call and output gathering**: ``process_batch`` with a function that emits its
   row without touching state (the task's loop, the generator, ``list.extend``).
5. **state access**: ``process_batch`` with the workload's ``RunningSum`` (read, add, write;
   RocksDB's write-back cache flushed at the end).
6. **output rows to Arrow**: plus the Spark runtime's ``to_batch`` of each batch's output.
7. **event time and watermark**: step 5 with the ``seq`` column as event time and a lateness,
   so the watermark moves between records (no timers registered: the bookkeeping only).

Each stage runs ``--repeats`` times on fresh state and the fastest run counts (a neighbour's
burst on a shared machine would otherwise decide it). cProfile's attribution of the same path is
``python -m benchmarks.profiling inprocess``; this tool subtracts instead, so nothing is
inflated by the profiler.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python benchmarks/breakdown.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa

from benchmarks.functions import RunningSum
from benchmarks.measure import clock
from benchmarks.workload import KEY_GROUP, Workload
from statecore.runtime import Context, KeyedProcessFunction

__all__ = ["STAGES", "Stage", "breakdown", "main"]

HERE = Path(__file__).resolve().parent
OUTPUT = pa.schema([("key", pa.string()), ("value", pa.int64()), ("new_sum", pa.int64())])
LATENESS_MS = 1_000


class EmitOnly(KeyedProcessFunction):
    """Stage 4: the workload's output row without state (the total is the value)."""

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[str, int, int]]:
        yield ctx.current_key, value.value, value.value


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[list[pa.RecordBatch], Any], int]
    """Runs the stage over the batches with a fresh backend; the rows it produced."""


def _arrow_to_python(batches: list[pa.RecordBatch], backend: Any) -> int:
    n = 0
    for batch in batches:
        keys = batch.column("key").to_pylist()
        batch.column(KEY_GROUP).to_pylist()
        batch.column("value").to_pylist()
        n += len(keys)
    return n


def _records_of(batch: pa.RecordBatch) -> tuple[list[Any], Iterator[tuple[Any, ...]]]:
    """The key column as Python values and one record (namedtuple) per row, as the task
    builds them."""
    from collections import namedtuple

    names = [c for c in batch.schema.names if c != KEY_GROUP]
    row = namedtuple("Record", names)  # type: ignore[misc]
    columns = [batch.column(c).to_pylist() for c in names]
    return columns[0], map(functools.partial(tuple.__new__, row), zip(*columns))


def _records(batches: list[pa.RecordBatch], backend: Any) -> int:
    n = 0
    for batch in batches:
        keys, records = _records_of(batch)
        for _key, _group, _record in zip(keys, batch.column(KEY_GROUP).to_pylist(), records):
            n += 1
    return n


def _key_current(batches: list[pa.RecordBatch], backend: Any) -> int:
    n = 0
    for batch in batches:
        keys, records = _records_of(batch)
        groups = batch.column(KEY_GROUP)
        backend.check_key_groups(groups, keys)
        prefixed = backend.prefixed_key_setter(batch.column("key"), groups)
        if prefixed is None:
            (context, listeners), prefixes = backend.batch_key_setter(), repeat(b"")
        else:
            (context, listeners), prefixes = prefixed
        for key, group, prefix, _record in zip(keys, groups.to_pylist(), prefixes, records):
            context.key = key
            context.key_group = group
            if prefixed is not None:
                context.prefix = prefix
            if listeners:
                for listener in listeners:
                    listener()
            n += 1
    return n


def _task(
    function: KeyedProcessFunction,
    *,
    to_arrow: bool = False,
    event_time: str | None = None,
) -> Callable[[list[pa.RecordBatch], Any], int]:
    def run(batches: list[pa.RecordBatch], backend: Any) -> int:
        from statecore.runtime.task import KeyedOperatorTask
        from statecore.spark.executor import to_batch

        task = KeyedOperatorTask(
            function, backend, job="bench", operator="main", subtask_index=0, parallelism=1
        )
        task.open()
        n = 0
        lateness = None if event_time is None else LATENESS_MS
        for batch in batches:
            rows = task.process_batch(
                batch, key="key", key_group=KEY_GROUP, event_time=event_time, lateness_ms=lateness
            )
            if to_arrow:
                n += to_batch(rows, OUTPUT).num_rows
            else:
                n += len(rows)
        flush = getattr(backend, "flush", None)
        if flush is not None:
            flush()
        return n

    return run


STAGES = [
    Stage("Arrow to Python values", _arrow_to_python),
    Stage("records (namedtuples)", _records),
    Stage("key made current", _key_current),
    Stage("function call, output gathered", _task(EmitOnly())),
    Stage("state access (read, add, write)", _task(RunningSum())),
    Stage("output rows to Arrow", _task(RunningSum(), to_arrow=True)),
]
EVENT_TIME = Stage("event time, watermark moving", _task(RunningSum(), event_time="seq"))


def _once(stage: Stage, batches: list[pa.RecordBatch], backend_name: str) -> float:
    """One run of ``stage`` on a fresh backend: its seconds (its rows checked)."""
    from benchmarks.inprocess import _backend
    from statecore.runtime.collector import task_gc_policy

    with tempfile.TemporaryDirectory(prefix="breakdown-") as home:
        backend = _backend(backend_name, home)
        with task_gc_policy():
            start = clock()
            produced = stage.run(batches, backend)
            seconds = clock() - start
        backend.close()
    events = sum(b.num_rows for b in batches)
    if produced != events:
        raise AssertionError(f"{stage.name}: {produced} rows for {events} events")
    return seconds


def breakdown(workload: Workload, backend_name: str, repeats: int) -> list[tuple[str, float]]:
    """``(stage, µs per record added by it)`` for every stage, then the total. The stages run
    in turn, ``repeats`` rounds, and each stage's fastest run counts, so a burst of other work
    on the machine slows one round of every stage rather than all runs of one."""
    from benchmarks.inprocess import _batches

    with_seq = _batches(workload)
    without_seq = [b.drop_columns(["seq"]) for b in with_seq]  # the record is (key, value)
    runs = [(stage, without_seq) for stage in STAGES]
    runs += [(STAGES[4], with_seq), (EVENT_TIME, with_seq)]
    best = [float("inf")] * len(runs)
    for _ in range(repeats):
        for i, (stage, batches) in enumerate(runs):
            best[i] = min(best[i], _once(stage, batches, backend_name))
    events = workload.events
    out: list[tuple[str, float]] = []
    previous = 0.0
    for stage, seconds in zip(STAGES, best, strict=False):
        out.append((stage.name, (seconds - previous) * 1e6 / events))
        previous = seconds
    out.append(("total (stages 1-6)", previous * 1e6 / events))
    out.append((EVENT_TIME.name + " (vs stage 5 with seq)", (best[-1] - best[-2]) * 1e6 / events))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", action="append", choices=["heap", "rocksdb"])
    args = parser.parse_args(argv)
    workload = Workload.prepare(args.events, HERE / ".work")
    workload.reference  # noqa: B018
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.events:,} events, best of {args.repeats}, load average {load}\n")
    for name in args.backend or ["heap", "rocksdb"]:
        rows = breakdown(workload, name, args.repeats)
        total = dict(rows)["total (stages 1-6)"]
        print(f"| {name}: stage | µs per record | share |\n|---|---:|---:|")
        for stage, micros in rows:
            share = "" if stage.startswith(("total", "event")) else f"{micros / total:.0%}"
            print(f"| {stage} | {micros:.2f} | {share} |")
        print(f"\n{name}: {1e6 / total:,.0f} events/s through stages 1-6 on one core\n")


if __name__ == "__main__":
    main()
