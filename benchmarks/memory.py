"""The memory of statecore's local run, measured as Java Flink's is (:mod:`benchmarks.flink_java`):
a process tree of its own from start to exit, its peak PSS and RSS sampled over every process in
it (:class:`~benchmarks.measure.TreeRss`).

``python -m benchmarks.memory ROOT EVENTS WARM_ROOT WARM_EVENTS WORKDIR [KEY=VALUE ...]`` (the
two workloads, prepared by the caller; :class:`~benchmarks.workload.Workload`) is that process: a
Spark session with statecore's local defaults (:func:`statecore.spark.session.build_session` at
``local[2]``, as a job on this machine gets it, not the benchmark's own 4 GiB session; each
``KEY=VALUE`` a Spark setting added, to measure another one), an untimed warm-up run on the
small workload, then the per-record heap run of the benchmark; it prints one line of JSON. The
output is verified by the caller, outside the measured tree (as Java Flink's is).
:func:`statecore_heap_tree` starts it and samples its tree: the driver's Python, the JVM,
Spark's Python workers and any warm hosts, split by kind at the peak.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from benchmarks.measure import Sample, run_measured
from benchmarks.workload import Workload

__all__ = ["SMALL_HEAP", "VARIANT", "statecore_heap_tree", "variant_name"]

REPO = Path(__file__).resolve().parents[1]
VARIANT = "statecore heap, Spark local[2] end to end, own process tree (local defaults)"
TIMEOUT = 1800
MEMORY_SETTINGS = ("spark.driver.memory", "spark.sql.execution.arrow.maxRecordsPerBatch")
SMALL_HEAP = ("spark.driver.memory=512m",)
"""A smaller driver heap than Spark's default 1g, measured beside it in the same run."""


def variant_name(settings: tuple[str, ...] = ()) -> str:
    """The variant with ``settings`` (``KEY=VALUE``) added to the local defaults."""
    return VARIANT if not settings else VARIANT.replace("local defaults", ", ".join(settings))


def statecore_heap_tree(
    workload: Workload, warm: Workload, workdir: Path, settings: tuple[str, ...] = ()
) -> Sample:
    """Run :func:`main` in a process of its own; its sample carries the tree's peak RSS."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
    )}  # fmt: skip
    command = [
        sys.executable, "-m", "benchmarks.memory", str(workload.root), str(workload.events),
        str(warm.root), str(warm.events), str(workdir), *settings,
    ]  # fmt: skip
    result, rss = run_measured(
        command, name=variant_name(settings), cwd=REPO, env=env, timeout=TIMEOUT
    )
    from deltalake import DeltaTable

    output = DeltaTable(str(workdir / "run" / "output")).to_pyarrow_table()
    workload.reference.check_output(variant_name(settings), output, workload.events)
    return Sample(
        variant_name(settings),
        result["seconds"],
        workload.events,
        rss.peak,
        peak_pss=rss.peak_pss,
        extra={
            "memory": rss.parts_text(),
            "parts": rss.parts,
            "memory_pss": rss.pss_parts_text(),
            "pss_parts": rss.pss_parts,
            "settings": result["settings"],
        },
    )


def main(argv: list[str]) -> int:
    from benchmarks.on_spark import PARALLELISM, statecore_end_to_end
    from statecore.spark.session import build_session

    workload, warm = Workload(int(argv[1]), Path(argv[0])), Workload(int(argv[3]), Path(argv[2]))
    workdir = Path(argv[4])
    extra = dict(setting.split("=", 1) for setting in argv[5:])  # KEY=VALUE: to try settings
    spark = build_session(
        master=f"local[{PARALLELISM}]",
        app_name="statecore-bench-memory",
        config={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(PARALLELISM),
            **extra,
        },
        log_level="ERROR",
    )
    try:
        statecore_end_to_end(spark, warm, "heap", workdir / "warmup", verify=False)
        sample = statecore_end_to_end(spark, workload, "heap", workdir / "run", verify=False)
        conf = spark.sparkContext.getConf()
        settings = {
            key: conf.get(key, "(Spark's default)") for key in sorted({*MEMORY_SETTINGS, *extra})
        }
    finally:
        spark.stop()
    print(json.dumps({"seconds": sample.seconds, "settings": settings}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
