"""Profile statecore's hot paths on the benchmark workload (cProfile; no extra dependency).

    python -m benchmarks.profiling inprocess --events 200000   # KeyedOperatorTask, heap
    python -m benchmarks.profiling spark --events 200000       # one keyed_process run

``inprocess`` profiles ``KeyedOperatorTask.process_batch`` and a checkpoint write of the final
state. ``spark`` profiles the driver (plan, Spark job, commit, output write) with cProfile and the
Python side of every Spark task with Spark's own UDF profiler
(``spark.sql.pyspark.udf.profiler=perf``), after one warm-up run. The ``.pstats`` files land in
``benchmarks/.work/profiles/``. cProfile inflates per-call costs about 2–3×; read the shares, not
the absolute seconds.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as ``python benchmarks/profiling.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.workload import Workload

HERE = Path(__file__).resolve().parent
OUT = HERE / ".work" / "profiles"


def _print(stats: pstats.Stats, title: str, limit: int) -> None:
    for order in ("tottime", "cumulative"):
        buffer = io.StringIO()
        stats.stream = buffer  # type: ignore[attr-defined]
        stats.sort_stats(order).print_stats(limit)
        body = buffer.getvalue()
        print(f"\n===== {title}, by {order} =====\n{body[body.find('   ncalls') :]}")


def inprocess(workload: Workload, limit: int) -> None:
    """Only the timed parts: the per-record loop, then the checkpoint write of its state."""
    from benchmarks import inprocess as variants
    from benchmarks.functions import TOTAL, RunningSum
    from statecore.catalog import Catalog
    from statecore.checkpoint.coordinator import CheckpointCoordinator
    from statecore.config import StatecoreConfig
    from statecore.runtime.task import KeyedOperatorTask

    batches = [b.drop_columns(["seq"]) for b in variants._batches(workload)]
    backend = variants._backend("heap", str(OUT))
    task = KeyedOperatorTask(
        RunningSum(), backend, job="bench", operator="main", subtask_index=0, parallelism=1
    )
    task.open()
    profiler = cProfile.Profile()
    profiler.enable()
    for batch in batches:
        task.process_batch(batch, key="key", key_group=variants.KEY_GROUP)
    profiler.disable()
    profiler.dump_stats(OUT / "inprocess-task.pstats")
    _print(pstats.Stats(profiler), "in-process KeyedOperatorTask.process_batch, heap", limit)

    home = OUT / "inprocess-home"
    shutil.rmtree(home, ignore_errors=True)
    config = StatecoreConfig.resolve(home=str(home), env={})
    with Catalog.connect(config.catalog_url) as catalog:
        coordinator = CheckpointCoordinator(config, catalog, job="bench", operator="main")
        planned = coordinator.plan(1, parallelism=1, max_parallelism=128, default_parallelism=1)
        profiler = cProfile.Profile()
        profiler.enable()
        snapshots = task.snapshot({TOTAL.name: coordinator.table_uri(TOTAL.name)}, checkpoint_id=1)
        coordinator.commit(planned, snapshots)
        profiler.disable()
    profiler.dump_stats(OUT / "inprocess-checkpoint.pstats")
    _print(pstats.Stats(profiler), "checkpoint write (snapshot + commit), p=1", limit)


def spark(workload: Workload, limit: int) -> None:
    from benchmarks import on_spark
    from benchmarks.functions import RunningSum
    from statecore.config import StatecoreConfig
    from statecore.spark.keyed import keyed_process

    session = on_spark.session()

    def run(folder: Path, driver: cProfile.Profile | None) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        config = StatecoreConfig.resolve(home=str(folder / "home"), env={})
        start = time.perf_counter()
        if driver:
            driver.enable()
        events = session.read.schema(on_spark.INPUT_SCHEMA).parquet(str(workload.input_dir))
        result = keyed_process(
            events,
            key="key",
            function=RunningSum(),
            output_schema=on_spark.OUTPUT_SCHEMA,
            job="bench",
            checkpoint_id=1,
            parallelism=2,
            order_by=["seq"],
            config=config,
        )
        processed = time.perf_counter()
        result.output.write.parquet(str(folder / "output"))
        if driver:
            driver.disable()
        done = time.perf_counter()
        session.catalog.clearCache()
        print(
            f"keyed_process {processed - start:.2f} s (checkpoint "
            f"{result.checkpoint.duration}), output write {done - processed:.2f} s"
        )

    run(OUT / "spark-warmup", None)
    session.conf.set("spark.sql.pyspark.udf.profiler", "perf")
    driver = cProfile.Profile()
    run(OUT / "spark-run", driver)
    driver.dump_stats(OUT / "spark-driver.pstats")
    _print(pstats.Stats(driver), "driver (keyed_process + output write)", limit)
    dump = OUT / "spark-tasks"
    shutil.rmtree(dump, ignore_errors=True)
    session.profile.dump(str(dump))
    files = sorted(dump.glob("*perf.pstats"), key=lambda p: p.stat().st_mtime)
    if files:
        _print(pstats.Stats(str(files[-1])), "Spark tasks (Python side, both tasks)", limit)
    session.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=["inprocess", "spark"])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--limit", type=int, default=25)
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    workload = Workload.prepare(args.events, HERE / ".work")
    workload.reference  # noqa: B018
    {"inprocess": inprocess, "spark": spark}[args.target](workload, args.limit)


if __name__ == "__main__":
    main()
