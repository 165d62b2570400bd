"""Run every benchmark variant, interleaved, and regenerate ``benchmarks/RESULTS.md``.

    python -m benchmarks.run                      # the issue's 2,000,000 events -> RESULTS.md
    python -m benchmarks.run --events 200000      # quick -> RESULTS-200000.md
    python -m benchmarks.run --only "dict,heap, in-process" --no-write

Each repetition runs every variant once, in an order rotated per repetition, so that ratios
taken within a repetition hold on a noisy, shared machine. In-process variants run in a fresh
child process each; the Spark variants share one ``local[2]`` session, warmed up first on a
small workload.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import shlex
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python benchmarks/run.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import checkpoints, flink_java, inprocess, memory, windows
from benchmarks.measure import (
    Sample,
    best_of,
    clock,
    run_isolated,
    settle,
    start_fork_server,
)
from benchmarks.report import (
    CHECKPOINT,
    RAW_WRITE,
    TTL_CLEANUP,
    Results,
    describe,
    flink_section,
    machine_info,
    now,
    render,
    with_stream_section,
)
from benchmarks.workload import Workload

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
WARMUP_EVENTS = 10_000
FULL_EVENTS = 2_000_000

METHOD = """
## Method

- **Workload** (fixed by the issue): keyed running sum over N events, 100,000 keys
  `"user-" + str(i % 100000)` shuffled by numpy `default_rng(42)`, `value` in [0, 100) from the
  same generator, `seq` 0..N-1; per event read the key's sum (default 0), add, write back, emit
  `(key, value, new_sum)`. One Parquet file (`benchmarks/.work/events-N/input/`) feeds every
  variant. Every run is verified against a pandas groupby: final sum per key; for Spark variants
  also the output row count, per-key max of `new_sum` and `sum(new_sum)` (which only matches when
  each key's events ran in `seq` order).
- **dict loop**: the per-record ceiling; the same Arrow batches (10,000 rows) turned into Python
  lists, a dict get + set per event, an output tuple per event.
- **statecore in-process**: the same batches through `KeyedOperatorTask.process_batch` running a
  `KeyedProcessFunction` (`benchmarks/functions.py`), and a bare loop over
  `set_current_key` + `ValueState.value/update`; one backend owning all 128 key groups; key groups
  computed before timing (on Spark the JVM computes them). The RocksDB backend's write-back
  value cache (`RocksDBOptions.value_cache_entries`, 100,000 per state) is flushed to RocksDB
  inside the timing. Peak RSS is that child process's, including the loaded input and the
  imports (about 250 MiB of baseline).
- **In-process samples** (dict loop, statecore in-process, rocksdict, checkpoint write, TTL
  cleanup) are each the fastest of `--inner` runs (3 up to 500,000 events, else 1) on fresh
  state in one child process: at the quick size they take well under a second, where one burst
  of a neighbour on the shared 2-core machine would otherwise decide the number. Spark variants
  are single runs per repetition, each right after its own untimed warm-up run on 10,000
  events (one variant otherwise slows the next one's first job by seconds) and a wait until the
  JVM and its Python workers are idle.
- **TTL cleanup**: the final state as a ValueState with a one-hour TTL, every other key written
  one TTL after the others (a manual clock), checkpointed at p = 1 (128 key-group files); then
  `statecore.ops.ttl_cleanup.ttl_cleanup` (what `statecore ttl-cleanup` runs, without its VACUUM)
  at a time when exactly the earlier half has expired. Rows scanned per second; the cleaned
  checkpoint is read back and must hold exactly the later half, with their sums.
- **rocksdict raw get+put**: the RocksDB ceiling; utf-8 keys, 8-byte little-endian values,
  `raw_mode`, with the RocksDB backend's own `RocksDBOptions()` (cache, bloom filter, WAL off).
- **statecore end to end**: `keyed_process` on Spark `local[2]` at parallelism 2 with
  `order_by=["seq"]`, a fresh job (checkpoint 1: snapshot, Delta commit, SQLite catalog), the
  output written by the tasks to the job's exactly-once Delta output table (`output_table`,
  committed with the checkpoint); timed from reading the input to the completed checkpoint.
- **Spark transformWithState(InPandas)**: a file-source stream over the same Parquet folder,
  `trigger(availableNow=True)`, RocksDB state store provider, `spark.sql.shuffle.partitions=2`,
  `outputMode("append")` to a Parquet sink, timed from `readStream` to `awaitTermination()`.
  The processors read and write the state **once per key and micro-batch** (the idiomatic and
  cheapest use; per-event state calls would each cross the Python–JVM socket) and sort the key's
  rows by `seq`.
- **Peak RSS** of Spark variants: the sampled sum over the whole process tree (harness Python,
  JVM with its 4 GiB heap limit, Python workers); the JVM keeps memory it once took, so later
  variants inherit earlier peaks.
- **statecore vectorized**: `keyed_process_batches` with `RunningAggregate("value", TOTAL,
  output="new_sum")` on the same input, shuffle, `order_by=["seq"]`, state descriptor and
  checkpoint as the per-record run: each task gathers Spark's Arrow batches into keyed batches
  (up to 1,000,000 rows), reads and writes the state once per distinct key and batch, and
  computes the running sums with a grouped cumulative sum.
- **Java Flink 2.3** (`benchmarks/flink/`, a Maven project pinned to Flink 2.3.0 from Maven
  Central, built into `build/flink-bench/` on first use; `benchmarks/flink_java.py`): the same
  events as CSV (`build/bench/events-N.csv`, `key,value,seq` in `seq` order, written once from
  the Parquet file; Flink's CSV parsing is in its time, Spark's Parquet reading in statecore's),
  one `FileSource` reader, `keyBy(key)`, a `KeyedProcessFunction` that per event reads a
  `ValueState<Long>`, adds, writes it and emits `(key, value, new_sum)`, a sink writing every
  row to one CSV file per subtask; parallelism 2 on a `MiniCluster` (one task manager, 2
  slots), `state.backend.type` `hashmap` or `rocksdb` (Flink's defaults otherwise: RocksDB with
  its managed memory, full checkpoints). Checkpointing is on with a one-hour interval, so the one
  checkpoint of a run is Flink's final checkpoint after the end of the bounded input (the tasks
  wait for it before they finish), triggered as soon as every sink subtask has flushed its last
  row; it is inside the timing, as statecore's checkpoint 1 is. Each run is one JVM (JDK 17,
  Flink's and the JVM's defaults, no `-Xmx`): the MiniCluster, an untimed warm-up run on 10,000
  events, then the timed run (from building the job to its result). Its output files are read
  back and verified as statecore's are (rows, per-key sums, `sum(new_sum)`).
- **Tumbling-window sum** (issue 42; `benchmarks/windows.py`): event time is `seq` in
  milliseconds, windows of a quarter of the input (500,000 ms at 2,000,000 events: up to four
  windows a key), every window fired at the end of the input, a row `(key, window_start, total)`
  each. statecore: `statecore.windows.window(TumblingWindows(...)).aggregate(...)` through
  `keyed_process(event_time="seq", end_of_input=True)` on the heap backend at parallelism 2,
  output to the job's Delta output table with checkpoint 1. Spark: a batch
  `groupBy("key", window(timestamp_millis("seq"), ...)).agg(sum("value"))` to Parquet. Java
  Flink: `TumblingEventTimeWindows` with monotonous watermarks and an `AggregateFunction` plus
  `ProcessWindowFunction`, on HashMapStateBackend, run as above. Each output is verified against
  pandas (windows, the sum of totals, a checksum weighting each total by its window).
- **Memory** (issue 43): peak PSS and peak RSS of a whole process tree from its start to its
  exit, each sampled every 0.2 s as the sum over every process in it, the same way for both
  sides. PSS divides a page shared by several processes (PySpark's workers share their
  daemon's imported modules copy-on-write) among them, RSS counts it in each: the target is
  compared on PSS, the RSS ratio is kept beside it. Java Flink: its one JVM.
  statecore: `python -m benchmarks.memory`, a process of its own with a Spark session on
  statecore's local defaults (`build_session(master="local[2]")`, not the 4 GiB session above):
  the driver's Python, Spark's JVM, the Python workers, warm hosts if any; an untimed warm-up
  run, then the per-record heap run; its output is verified by the harness, outside the tree.
  The split by process is that of the peak sample.
"""


def _spark_variants(
    spark: Any, work: Path, backends: list[str]
) -> dict[str, Callable[[Workload, str], Sample]]:
    """Name -> ``run(workload, tag)``; ``tag`` names the run's working folder."""
    from benchmarks import on_spark

    out: dict[str, Callable[[Workload, str], Sample]] = {}
    for backend in backends:
        out[f"statecore {backend}, Spark local[2] end to end"] = lambda w, tag, b=backend: (
            on_spark.statecore_end_to_end(  # type: ignore[misc]
                spark, w, b, work / f"{tag}statecore-{b}"
            )
        )
        out[f"statecore vectorized ({backend}), Spark local[2] end to end"] = (
            lambda w, tag, b=backend: on_spark.statecore_end_to_end(  # type: ignore[misc]
                spark, w, b, work / f"{tag}vectorized-{b}", vectorized=True
            )
        )
    out["dict loop, Spark local[2] (same shuffle + sort, no checkpoint)"] = lambda w, tag: (
        on_spark.dict_on_spark(spark, w, work / f"{tag}dict-spark")
    )
    out["Spark transformWithState, RocksDB store, local[2]"] = lambda w, tag: (
        on_spark.spark_transform_with_state(spark, w, pandas=False, workdir=work / f"{tag}tws-rows")
    )
    out["Spark transformWithStateInPandas, RocksDB store, local[2]"] = lambda w, tag: (
        on_spark.spark_transform_with_state(
            spark, w, pandas=True, workdir=work / f"{tag}tws-pandas"
        )
    )
    out[windows.STATECORE_VARIANT] = lambda w, tag: windows.statecore_window(
        spark, w, work / f"{tag}window-statecore"
    )
    out[windows.SPARK_VARIANT] = lambda w, tag: windows.spark_group_by_window(
        spark, w, work / f"{tag}window-spark"
    )
    return out


def _java_flink_variants(
    workload: Workload, warm: Workload, work: Path
) -> dict[str, Callable[[], Sample]]:
    """Java Flink's running sum on both backends and its window sum, each verified like
    statecore's (a mismatch fails the variant, and so the run)."""

    def runner(job: str, backend: str) -> Callable[[], Sample]:
        def run() -> Sample:
            window = windows.window_ms(workload.events)
            sample, output = flink_java.run(
                workload, warm, job=job, backend=backend, workdir=work / f"flink-{job}-{backend}",
                window_ms=window,
            )  # fmt: skip
            if job == "sum":
                workload.reference.check_output(sample.variant, output, workload.events)
            else:
                windows.reference(workload).check(sample.variant, output)
            return sample

        return run

    jobs = [("sum", "hashmap"), ("sum", "rocksdb"), ("window", "hashmap")]
    return {flink_java.variant_name(job, backend): runner(job, backend) for job, backend in jobs}


def _warmed(
    spark: Any, run: Callable[[Workload, str], Sample], warm: Workload, workload: Workload
) -> Callable[[], Sample]:
    """Each timed Spark run right after its own warm-up run on a small workload: one variant
    leaves the session in a state (Python workers of another kind, JIT, heap) that slows the
    next variant's first job by seconds, which would otherwise be billed to whichever came next."""

    repetitions = itertools.count(1)

    def timed() -> Sample:
        # a folder of its own each repetition: statecore keeps one catalog engine per catalog
        # URL in a process, which expects the catalog's folder it made to stay there
        rep = next(repetitions)
        run(warm, f"warmup-{rep}-")
        spark.sparkContext._jvm.java.lang.System.gc()
        settle()
        return run(workload, f"{rep}-")

    return timed


def _selected(name: str, only: list[str]) -> bool:
    return not only or any(part.lower() in name.lower() for part in only)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=FULL_EVENTS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--inner",
        type=int,
        help="runs per in-process sample, the fastest counts (default: 3 up to "
        "500,000 events, 1 above, where one run takes seconds)",
    )
    parser.add_argument("--only", default="", help="comma-separated substrings of variant names")
    parser.add_argument("--no-spark", action="store_true", help="in-process variants only")
    parser.add_argument("--no-flink", action="store_true", help="without the Java Flink variants")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite RESULTS.md")
    parser.add_argument(
        "--output",
        type=Path,
        help="default: RESULTS.md for the issue's "
        f"{FULL_EVENTS:,} events, RESULTS-<events>.md for other sizes",
    )
    args = parser.parse_args(argv)
    if args.inner is None:
        args.inner = 3 if args.events <= 500_000 else 1
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    only = [p.strip() for p in args.only.split(",") if p.strip()]

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started, t0 = now(), clock()
    start_fork_server()  # before anything big is imported or Spark starts
    machine = machine_info()
    work = WORK / f"run-{args.events}"
    shutil.rmtree(work, ignore_errors=True)  # the previous run's folders
    workload = Workload.prepare(args.events, WORK)
    say(f"workload: {workload.events:,} events in {workload.parquet_path}")
    workload.reference  # computed once, pickled to the child processes  # noqa: B018
    backends = inprocess.backend_names()

    isolated: dict[str, Callable[[], Sample]] = {
        name: (
            lambda n=name: run_isolated(
                inprocess.run_variant,
                n,
                workload,  # type: ignore
                args.inner,
            )
        )
        for name in inprocess.variants()
    }
    isolated[CHECKPOINT] = lambda: run_isolated(
        best_of, args.inner, checkpoints.checkpoint_and_restore, workload
    )
    isolated[TTL_CLEANUP] = lambda: run_isolated(
        best_of, args.inner, checkpoints.ttl_cleanup, workload
    )
    planned = {k: v for k, v in isolated.items() if _selected(k, only)}

    skipped: dict[str, str] = {}
    warm = Workload.prepare(WARMUP_EVENTS, WORK)
    if not args.no_flink:
        java = _java_flink_variants(workload, warm, work)
        if any(_selected(name, only) for name in java):
            try:
                flink_java.build()  # once, before anything is timed
                flink_java.events_csv(workload), flink_java.events_csv(warm)
            except flink_java.FlinkUnavailable as exc:
                say(f"Java Flink variants skipped: {exc}")
                skipped.update({name: str(exc) for name in java})
            else:
                planned.update({k: v for k, v in java.items() if _selected(k, only)})

    spark = None
    if not args.no_spark:
        from benchmarks import on_spark

        for settings in ((), memory.SMALL_HEAP):
            if _selected(memory.variant_name(settings), only):
                planned[memory.variant_name(settings)] = lambda s=settings: (  # type: ignore[misc]
                    memory.statecore_heap_tree(workload, warm, work / "memory", s)
                )
        spark = on_spark.session()
        warm.reference  # noqa: B018
        planned.update(
            {
                name: _warmed(spark, run, warm, workload)
                for name, run in _spark_variants(spark, work, backends).items()
                if _selected(name, only)
            }
        )

    output = args.output or HERE / (
        "RESULTS.md" if args.events == FULL_EVENTS else f"RESULTS-{args.events}.md"
    )

    def write(done: int) -> None:
        """Render what ran so far; after every repetition, so a cut-short run leaves results."""
        results = Results(
            events=args.events,
            repeats=done,
            command="python -m benchmarks.run "
            + shlex.join(argv if argv is not None else sys.argv[1:]),
            samples=samples,
            failures=failures,
            machine=machine,
            started=started,
            seconds=clock() - t0,
            backends=backends,
            skipped=skipped,
        )
        text = render(results, METHOD, flink_section(results))
        if args.no_write:
            if done == args.repeats:
                print(text)
        else:
            output.write_text(with_stream_section(output, text))
            say(f"wrote {output} ({done} of {args.repeats} repetitions)")

    samples: list[list[Sample]] = []
    failures: dict[str, str] = {}
    names = list(planned)
    for rep in range(args.repeats):
        # rotated each repetition, and reversed every other one, so no variant always follows
        # the same other variant
        order = names[rep % len(names) :] + names[: rep % len(names)] if names else []
        if rep % 2:
            order.reverse()
        this: list[Sample] = []
        for name in order:
            if name in failures:
                continue
            try:
                sample = planned[name]()
            except Exception as exc:  # a failed variant is reported, the others still run
                traceback.print_exc()
                failures[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                continue
            this.append(sample)
            say(f"[{rep + 1}/{args.repeats}] {describe(sample)}")
            if name == CHECKPOINT:
                this.append(
                    Sample(RAW_WRITE, sample.extra["raw_seconds"], sample.events, sample.peak_rss)
                )
            if name == "statecore heap, Spark local[2] end to end" and spark is not None:
                rescaled = checkpoints.rescale(spark, workload, sample.extra["home"])
                this.append(rescaled)
                say(f"[{rep + 1}/{args.repeats}] {describe(rescaled)}")
        samples.append(this)
        write(rep + 1)

    if spark is not None:
        spark.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
