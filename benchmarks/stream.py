"""The streaming benchmark of issue 13: a keyed running sum over a stream of micro-batches.

    python -m benchmarks.stream                          # 31 x 65,536 events -> RESULTS.md
    python -m benchmarks.stream --batches 5 --batch-events 8192 --no-write   # quick look

The events of :mod:`benchmarks.workload` (100,000 keys) cut into one Parquet file per micro-batch,
read by Spark's file source with ``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)``, so
each variant sees the same micro-batches in the same order:

- statecore (heap, RocksDB, vectorized): ``keyed_stream`` (``keyed_stream_batches``) with its
  defaults (changelog checkpoints, 10 checkpoints retained); parallelism 2,
  ``order_by=["seq"]``, output to the job's exactly-once Delta output table;
- Spark's ``transformWithState`` (Row API, RocksDB state store, 2 shuffle partitions, Parquet
  sink), one state read and write per key and micro-batch.

After an untimed warm-up stream of every kind on the session (Spark's own start is not billed to
the first variant). Per micro-batch: Spark's ``triggerExecution`` duration from the query's
progress (the same measure for every variant), and for statecore whether its tasks kept their
state warm (``warm_tasks`` of the run's restore metrics). Every variant's output is verified
against a pandas reference. A second part measures the fixed cost of a run: a micro-batch of
100 events and an empty one, repeated, and where the driver's time goes (cProfile of one small
run).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python benchmarks/stream.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow.parquet as pq

from benchmarks.measure import clock
from benchmarks.on_spark import (
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    PARALLELISM,
    RowRunningSum,
    _fresh,
    _verify_output,
    session,
)
from benchmarks.report import STREAM_BEGIN, STREAM_END, machine_info
from benchmarks.workload import Workload

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
BEGIN, END = STREAM_BEGIN, STREAM_END


@dataclass
class StreamSample:
    variant: str
    seconds: float
    events: int
    batch_ms: list[float]
    warm: list[tuple[int, int]] = field(default_factory=list)  # (warm_tasks, tasks) per batch

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    @property
    def reuse(self) -> float | None:
        later = self.warm[1:]
        tasks = sum(t for _, t in later)
        return sum(w for w, _ in later) / tasks if tasks else None


def prepare(batches: int, batch_events: int) -> tuple[Workload, Path]:
    """The workload of ``batches * batch_events`` events and its folder of one file per batch
    (modification times one second apart, so the file source takes them in order)."""
    workload = Workload.prepare(batches * batch_events, WORK)
    folder = WORK / f"stream-{batches}x{batch_events}"
    if not (folder / "done").exists():
        _fresh(folder)
        table = workload.table()
        base = time.time() - batches - 10
        for i in range(batches):
            path = folder / f"batch-{i:05d}.parquet"
            pq.write_table(table.slice(i * batch_events, batch_events), path)
            os.utime(path, (base + i, base + i))
        (folder / "done").touch()
    return workload, folder


def _stream(spark: Any, folder: Path) -> Any:
    return (
        spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))
    )


def _batch_ms(query: Any) -> list[float]:
    return [
        float(p["durationMs"]["triggerExecution"])
        for p in sorted(query.recentProgress, key=lambda p: p["batchId"])
        if p["numInputRows"] > 0
    ]


class _WarmLog(logging.Handler):
    """Each run's "N of M tasks kept their state warm" line of the driver's log, as
    ``(warm_tasks, tasks)`` (a stream's runs are inside the query)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.warm: list[tuple[int, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "kept their state warm" in str(record.msg) and isinstance(record.args, tuple):
            self.warm.append((int(record.args[3]), int(record.args[4])))


def statecore_stream(
    spark: Any,
    workload: Workload,
    folder: Path,
    backend: str,
    *,
    vectorized: bool = False,
    tag: str = "",
    changelog: bool = True,
) -> StreamSample:
    from benchmarks.functions import TOTAL, RunningSum
    from statecore.config import StatecoreConfig
    from statecore.spark import keyed_stream, keyed_stream_batches
    from statecore.vectorized import RunningAggregate

    variant = f"statecore {'vectorized ' if vectorized else ''}{backend}"
    run_dir = _fresh(WORK / "stream-runs" / (tag + variant.replace(" ", "-")))
    config = StatecoreConfig.resolve(home=str(run_dir / "home"), env={})
    output = run_dir / "output"
    common: dict[str, Any] = dict(
        key="key",
        output_schema=OUTPUT_SCHEMA,
        job="stream",
        checkpoint_location=str(run_dir / "offsets"),
        trigger={"availableNow": True},
        parallelism=PARALLELISM,
        order_by=["seq"],
        backend=backend,
        config=config,
        output_table=str(output),
        changelog=changelog,
    )
    runs = _WarmLog()
    driver_log = logging.getLogger("statecore.spark.keyed")
    driver_log.addHandler(runs)
    driver_log.setLevel(logging.INFO)
    start = clock()
    try:
        if vectorized:
            query = keyed_stream_batches(
                _stream(spark, folder),
                function=RunningAggregate("value", TOTAL, output="new_sum"),
                **common,
            )
        else:
            query = keyed_stream(_stream(spark, folder), function=RunningSum(), **common)
        query.awaitTermination()
    finally:
        driver_log.removeHandler(runs)
    seconds = clock() - start
    if query.exception() is not None:
        raise RuntimeError(f"{variant}: {query.exception()}")
    _verify_output(workload, variant, output)
    return StreamSample(variant, seconds, workload.events, _batch_ms(query), [(0, 0), *runs.warm])


def floor_stream(spark: Any, workload: Workload, folder: Path) -> StreamSample:
    """The floor under any keyed Python operator on this Spark: per micro-batch, the shuffle by
    key into 2 partitions, the sort by ``seq`` and the records through Python and back
    (``mapInArrow`` passing its batches through), counted; no state, no output."""
    run_dir = _fresh(WORK / "stream-runs" / "floor")

    def each(df: Any, batch_id: int) -> None:
        df.repartition(PARALLELISM, "key").sortWithinPartitions("seq").mapInArrow(
            _pass_through, df.schema
        ).count()

    start = clock()
    query = (
        _stream(spark, folder)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(run_dir / "offsets"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = clock() - start
    if query.exception() is not None:
        raise RuntimeError(f"floor: {query.exception()}")
    return StreamSample(
        "Spark floor: shuffle + sort + Python pass-through (no state)",
        seconds,
        workload.events,
        _batch_ms(query),
    )


def _pass_through(batches: Any) -> Any:
    yield from batches


def tws_stream(spark: Any, workload: Workload, folder: Path, *, tag: str = "") -> StreamSample:
    variant = "Spark transformWithState (RocksDB store)"
    run_dir = _fresh(WORK / "stream-runs" / f"{tag}tws")
    output = run_dir / "output"
    start = clock()
    result = (
        _stream(spark, folder)
        .groupBy("key")
        .transformWithState(
            RowRunningSum(), outputStructType=OUTPUT_SCHEMA, outputMode="Append", timeMode="None"
        )
    )
    query = (
        result.writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(run_dir / "checkpoint"))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = clock() - start
    if query.exception() is not None:
        raise RuntimeError(f"{variant}: {query.exception()}")
    _verify_output(workload, variant, output)
    return StreamSample(variant, seconds, workload.events, _batch_ms(query))


def warm_up(spark: Any) -> None:
    """A small stream through each kind of variant first (untimed), so the session's first
    query does not bill Spark's own start (JIT, codegen, Python workers) to the first variant's
    first micro-batch."""
    workload, folder = prepare(2, 1024)
    for backend in ("heap", "rocksdb"):
        statecore_stream(spark, workload, folder, backend, tag="warmup-")
    statecore_stream(spark, workload, folder, "heap", vectorized=True, tag="warmup-")
    tws_stream(spark, workload, folder, tag="warmup-")


# -- fixed costs -----------------------------------------------------------------------------


def fixed_costs(spark: Any, runs: int = 8) -> dict[str, Any]:
    """Seconds of runs of 100 events and of empty runs of one job (heap, parallelism 2, output
    table), after a first run; and the driver's top functions (cumulative) in one small run."""
    from benchmarks.functions import RunningSum
    from statecore.config import StatecoreConfig
    from statecore.spark import keyed_process

    run_dir = _fresh(WORK / "stream-runs" / "fixed")
    config = StatecoreConfig.resolve(home=str(run_dir / "home"), env={})
    rows = [(f"user-{i % 37}", i % 100, i) for i in range(100)]
    small = spark.createDataFrame(rows, INPUT_SCHEMA)
    empty = spark.createDataFrame([], INPUT_SCHEMA)

    def once(df: Any, checkpoint_id: int) -> tuple[float, Any]:
        start = clock()
        run = keyed_process(
            df,
            key="key",
            function=RunningSum(),
            output_schema=OUTPUT_SCHEMA,
            job="fixed",
            checkpoint_id=checkpoint_id,
            parallelism=PARALLELISM,
            order_by=["seq"],
            config=config,
            output_table=str(run_dir / "output"),
            input_fingerprint={"batch_id": checkpoint_id},
        )
        return clock() - start, run

    first, _ = once(small, 0)
    small_s, empty_s, warm = [], [], []
    for i in range(runs):
        seconds, run = once(small, 1 + 2 * i)
        small_s.append(seconds)
        warm.append(run.restore.get("warm_tasks", 0))
        empty_s.append(once(empty, 2 + 2 * i)[0])
    profile = cProfile.Profile()
    profile.enable()
    once(small, 2 * runs + 1)
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(40)
    return {
        "first": first,
        "small": small_s,
        "empty": empty_s,
        "warm": warm,
        "profile": text.getvalue(),
    }


# -- report ------------------------------------------------------------------------------------


def render(samples: list[StreamSample], fixed: dict[str, Any] | None, args: Any) -> str:
    lines = [
        BEGIN,
        "## Streaming (issue 13)",
        "",
        f"`python -m benchmarks.stream {' '.join(sys.argv[1:])}`: {args.batches} micro-batches "
        f"of {args.batch_events:,} events (one Parquet file each, `maxFilesPerTrigger=1`, "
        "`availableNow`), 100,000 keys, running sum, parallelism 2 on Spark `local[2]`; "
        "statecore through `keyed_stream` (`keyed_stream_batches`) with its defaults "
        + (
            "but `changelog=False` (whole key groups per checkpoint)"
            if args.no_changelog
            else "(changelog checkpoints, 10 checkpoints retained)"
        )
        + ". Per micro-batch: "
        "Spark's `triggerExecution` time, after an untimed warm-up stream of each kind. "
        "Warm: share of tasks after the first micro-batch "
        "that continued the state kept warm (in the subtask's warm state host, `keyed_stream`'s "
        "default; the others restored from Delta). "
        "Machine: " + "; ".join(f"{k} {v}" for k, v in machine_info().items()) + ".",
        "",
        "| variant | events/s across the stream | total s | first ms | median ms | last ms "
        "| warm tasks |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in samples:
        reuse = "" if s.reuse is None else f"{s.reuse:.0%}"
        lines.append(
            f"| {s.variant} | {s.rate:,.0f} | {s.seconds:.1f} | {s.batch_ms[0]:,.0f} | "
            f"{statistics.median(s.batch_ms):,.0f} | {s.batch_ms[-1]:,.0f} | {reuse} |"
        )
    tws = next((s for s in samples if "transformWithState" in s.variant), None)
    if tws is not None:
        lines.append("")
        lines += [
            f"- {s.variant}: {s.rate / tws.rate:.1f}x transformWithState"
            for s in samples
            if s is not tws and "floor" not in s.variant
        ]
    if fixed is not None:
        lines += [
            "",
            "### Fixed cost of a run",
            "",
            "One job (heap, parallelism 2, output table) on the same session: the first run of "
            "100 events, then alternately runs of 100 events and empty runs "
            f"({len(fixed['small'])} each).",
            "",
            f"- first run: {fixed['first'] * 1000:,.0f} ms",
            f"- 100 events: median {statistics.median(fixed['small']) * 1000:,.0f} ms "
            f"(min {min(fixed['small']) * 1000:,.0f}); warm tasks per run {fixed['warm']}",
            f"- empty: median {statistics.median(fixed['empty']) * 1000:,.0f} ms "
            f"(min {min(fixed['empty']) * 1000:,.0f})",
            "",
            "<details><summary>Driver profile of one 100-event run (cumulative)</summary>",
            "",
            "```",
            *[line for line in fixed["profile"].splitlines() if line.strip()][:60],
            "```",
            "</details>",
        ]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Put ``section`` into ``path`` in place of its streaming section (appended when none)."""
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=31)
    parser.add_argument("--batch-events", type=int, default=65_536)
    parser.add_argument("--only", default="", help="comma-separated substrings of variants")
    parser.add_argument("--no-tws", action="store_true", help="without transformWithState")
    parser.add_argument("--no-fixed", action="store_true", help="without the fixed-cost part")
    parser.add_argument("--no-write", action="store_true", help="print, do not edit RESULTS.md")
    parser.add_argument(
        "--no-changelog", action="store_true", help="whole key groups per checkpoint"
    )
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args(argv)
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    changelog = not args.no_changelog
    workload, folder = prepare(args.batches, args.batch_events)
    workload.reference  # noqa: B018 (computed before any timing)
    spark = session()
    warm_up(spark)
    variants: dict[str, Any] = {
        "statecore heap": lambda: statecore_stream(
            spark, workload, folder, "heap", changelog=changelog
        ),
        "statecore rocksdb": lambda: statecore_stream(
            spark, workload, folder, "rocksdb", changelog=changelog
        ),
        "statecore vectorized heap": lambda: statecore_stream(
            spark, workload, folder, "heap", vectorized=True, changelog=changelog
        ),
    }
    variants["Spark floor"] = lambda: floor_stream(spark, workload, folder)
    if not args.no_tws:
        variants["Spark transformWithState"] = lambda: tws_stream(spark, workload, folder)
    samples = []
    for name, run in variants.items():
        if only and not any(o.lower() in name.lower() for o in only):
            continue
        sample = run()
        print(
            f"{sample.variant}: {sample.rate:,.0f} events/s, {sample.seconds:.1f} s, "
            f"batches ms first {sample.batch_ms[0]:.0f} median "
            f"{statistics.median(sample.batch_ms):.0f} last {sample.batch_ms[-1]:.0f}, "
            f"warm {sample.reuse}",
            file=sys.stderr,
            flush=True,
        )
        samples.append(sample)
    fixed = None if args.no_fixed else fixed_costs(spark)
    spark.stop()
    section = render(samples, fixed, args)
    if args.no_write:
        print(section)
    else:
        write_section(args.output, section)
        print(f"wrote the streaming section of {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
