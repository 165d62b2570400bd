"""Java Flink beside statecore: the same workload on Flink 2.3's MiniCluster at parallelism 2.

``benchmarks/flink/`` is a small Maven project (Flink 2.3.0 from Maven Central); :func:`build`
compiles it on first use into ``build/flink-bench/`` (the job's jar and its class path), and
:func:`events_csv` writes the workload's events once as CSV (``key,value,seq`` in ``seq``
order, no header) into ``build/bench/``: the Java job reads that file, statecore and Spark read
the Parquet file of the same rows. Each run is one JVM: a MiniCluster, an untimed warm-up run on
the small workload, then the timed run; its whole process's peak RSS is sampled from start to
exit, as :mod:`benchmarks.memory` samples statecore's own process tree. The output (every row,
as CSV) is read back and verified like statecore's: a mismatch fails the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from benchmarks.measure import Sample, run_measured
from benchmarks.workload import Workload

__all__ = [
    "BACKENDS",
    "FlinkUnavailable",
    "build",
    "events_csv",
    "read_output",
    "run",
    "variant_name",
]

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "benchmarks" / "flink"
BUILD = REPO / "build" / "flink-bench"
BENCH_DATA = REPO / "build" / "bench"
MAIN_CLASS = "statecore.bench.FlinkBench"
BACKENDS = {"hashmap": "HashMapStateBackend", "rocksdb": "EmbeddedRocksDBStateBackend"}
TIMEOUT = 1800  # seconds a run may take before it counts as failed


class FlinkUnavailable(RuntimeError):
    """Java or Maven is missing: the Java Flink variants are skipped, saying why."""


def variant_name(job: str, backend: str) -> str:
    """``sum`` is the per-record running sum, ``window`` the tumbling-window sum."""
    if job == "sum":
        return f"Java Flink 2.3 {BACKENDS[backend]}, MiniCluster p=2"
    return f"Java Flink 2.3 tumbling window sum ({BACKENDS[backend]}), MiniCluster p=2"


def _sources() -> list[Path]:
    return [PROJECT / "pom.xml", *sorted((PROJECT / "src").rglob("*.java"))]


def _jar() -> Path:
    return BUILD / "target" / "flink-bench-1.jar"


def build() -> str:
    """Compile the Java job when its jar is missing or older than its sources; its class path."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        raise FlinkUnavailable(
            f"{' and '.join(missing)} not found on PATH: the Java Flink variants need a JDK 17 "
            "and Maven (apt-get install openjdk-17-jdk-headless maven)"
        )
    jar = _jar()
    newest = max(p.stat().st_mtime for p in _sources())
    if not jar.exists() or jar.stat().st_mtime < newest or not (BUILD / "lib").is_dir():
        built = subprocess.run(
            ["mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(PROJECT / "pom.xml"),
             "package", "dependency:copy-dependencies"],
            capture_output=True, text=True, timeout=TIMEOUT, check=False,
        )  # fmt: skip
        if built.returncode != 0 or not jar.exists():
            raise RuntimeError(
                "building the Java Flink job failed (mvn package dependency:copy-dependencies in "
                f"{PROJECT}):\n{(built.stdout + built.stderr)[-3000:]}"
            )
    return os.pathsep.join([str(jar), *sorted(str(p) for p in (BUILD / "lib").glob("*.jar"))])


def events_csv(workload: Workload) -> Path:
    """The workload's events as CSV for the Java job, written once per size."""
    path = BENCH_DATA / f"events-{workload.events}.csv"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        table = workload.table().sort_by("seq").select(["key", "value", "seq"])
        tmp = path.with_suffix(".tmp")
        pacsv.write_csv(table, tmp, pacsv.WriteOptions(include_header=False, quoting_style="none"))
        tmp.rename(path)
    return path


def read_output(folder: Path, names: list[str]) -> pa.Table:
    """Every ``part-*.csv`` the Java job's sink subtasks wrote, as one table."""
    parts = sorted(folder.glob("part-*.csv"))
    if not parts:
        raise RuntimeError(f"the Java Flink job wrote no output in {folder}")
    schema = {names[0]: pa.string(), names[1]: pa.int64(), names[2]: pa.int64()}
    tables = [
        pacsv.read_csv(
            part,
            pacsv.ReadOptions(column_names=names),
            convert_options=pacsv.ConvertOptions(column_types=schema),
        )
        for part in parts
        if part.stat().st_size
    ]
    return pa.concat_tables(tables) if tables else pa.table({n: [] for n in names})


def run(
    workload: Workload,
    warm: Workload,
    *,
    job: str,
    backend: str,
    workdir: Path,
    window_ms: int = 1,
) -> tuple[Sample, pa.Table]:
    """One JVM: warm-up on ``warm``, then the timed run on ``workload``; the sample (its peak
    RSS that of the whole JVM process from start to exit) and the job's output, unverified."""
    if job not in ("sum", "window") or backend not in BACKENDS:
        raise ValueError(f"job is sum or window and backend one of {list(BACKENDS)}")
    classpath = build()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    output = workdir / "output"
    command = [
        "java", "-cp", classpath, MAIN_CLASS, job, backend, str(events_csv(workload)),
        str(output), str(workdir / "checkpoints"), str(window_ms), str(events_csv(warm)),
    ]  # fmt: skip
    result, rss = run_measured(
        command, name=variant_name(job, backend), cwd=workdir, timeout=TIMEOUT
    )
    names = ["key", "value", "new_sum"] if job == "sum" else ["key", "window_start", "total"]
    table = read_output(output, names)
    if table.num_rows != result["rows"]:
        raise RuntimeError(
            f"{variant_name(job, backend)}: {table.num_rows} rows in its files, "
            f"{result['rows']} written"
        )
    sample = Sample(
        variant_name(job, backend),
        result["seconds"],
        workload.events,
        rss.peak,
        peak_pss=rss.peak_pss,
        extra={
            "final_checkpoint_seconds": round(result["final_checkpoint_seconds"], 3),
            "checkpoint_attempts": result["checkpoint_attempts"],
            "memory": rss.parts_text(),
            "memory_pss": rss.pss_parts_text(),
        },
    )
    shutil.rmtree(output, ignore_errors=True)
    return sample, table
