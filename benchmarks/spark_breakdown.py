"""Where an end-to-end Spark run's time goes, phase by phase (the benchmark's workload).

    python -m benchmarks.spark_breakdown --events 2000000     # heap: per record, vectorized
    python -m benchmarks.spark_breakdown --events 2000000 --only vectorized

One run per variant (after a warm-up run, as ``benchmarks.run`` warms), on the
benchmark's Spark session (``local[2]``, parallelism 2) with Spark's event log on. Three sources,
no listener and no profiler:

- **the driver**: :class:`~statecore.spark.runner.KeyedRunner`'s steps timed around the real
  methods (``begin``: the lease and the catalog; ``plan``: the watermark and the tasks' spec;
  ``execute``: the Spark job up to the collected reports; ``commit``: the checkpoint's commit of
  state and output tables and the catalog). The rest of the run is the catalog's connection and
  the checkpoint's planning.
- **Spark's event log** (``spark.eventLog.enabled``, read back as JSON): each stage's wall time
  (submission to completion) and its tasks' summed metrics: run time, CPU time, shuffle write
  time, shuffle fetch wait, GC, and the SQL metrics the plan's operators report (sort time, the
  data sent to and returned from the Python workers).
- **the tasks' reports** (their ``timing``): the Python worker's wait for its next input batch
  (the JVM side of stage 2: shuffle read, sort, Arrow serialization, when it is behind the
  worker), its loop over the input (operator and output included), the output files written and
  the snapshot.

Times of tasks are summed over the 2 tasks of a stage (2 cores): a stage's wall time is about
half of its tasks' summed time when both run at once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python benchmarks/spark_breakdown.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.measure import clock
from benchmarks.workload import Workload

__all__ = ["VARIANTS", "driver_timers", "stage_metrics", "task_timing", "main"]

VARIANTS = {"per record": False, "vectorized": True}
"""The variants: name -> ``vectorized`` of :func:`benchmarks.on_spark.statecore_end_to_end`."""

_TASK_METRICS = {
    "internal.metrics.executorRunTime": ("run time", 1e-3),
    "internal.metrics.executorCpuTime": ("CPU time", 1e-9),
    "internal.metrics.jvmGCTime": ("JVM GC", 1e-3),
    "internal.metrics.executorDeserializeTime": ("task deserialization", 1e-3),
    "internal.metrics.shuffle.write.writeTime": ("shuffle write", 1e-9),
    "internal.metrics.shuffle.read.fetchWaitTime": ("shuffle fetch wait", 1e-3),
}
"""Spark's task metrics kept: accumulable name -> (label, seconds per unit)."""


@contextlib.contextmanager
def driver_timers() -> Iterator[dict[str, Any]]:
    """The seconds of each of ``KeyedRunner``'s steps, and the tasks' reports (``metas``),
    for the runs inside the block."""
    from statecore.spark.runner import KeyedRunner

    times: dict[str, Any] = {"metas": []}
    originals = {
        name: getattr(KeyedRunner, name) for name in ("begin", "plan", "execute", "commit")
    }

    def timed(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                result = method(self, *args, **kwargs)
            finally:
                times[name] = times.get(name, 0.0) + clock() - started
            if name == "execute":
                times["metas"].extend(result[1])
            return result

        return run

    for name, method in originals.items():
        setattr(KeyedRunner, name, timed(name, method))
    try:
        yield times
    finally:
        for name, method in originals.items():
            setattr(KeyedRunner, name, method)


def stage_metrics(event_log: Path, job_ids: set[int] | None = None) -> list[dict[str, Any]]:
    """Per completed stage of the event log (of ``job_ids`` only, when given): its wall time
    and its tasks' summed metrics, in seconds (SQL metrics as Spark names them, in their unit)."""
    stage_jobs: dict[int, int] = {}
    stages: list[dict[str, Any]] = []
    with event_log.open() as lines:
        for line in lines:
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                for stage in event["Stage IDs"]:
                    stage_jobs[stage] = event["Job ID"]
            elif kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                job = stage_jobs.get(info["Stage ID"])
                if job_ids is not None and job not in job_ids:
                    continue
                row: dict[str, Any] = {
                    "job": job,
                    "stage": info["Stage ID"],
                    "name": info["Stage Name"].split(" at ")[0],
                    "tasks": info["Number of Tasks"],
                    "wall": (info["Completion Time"] - info["Submission Time"]) / 1e3,
                }
                for acc in info.get("Accumulables", []):
                    name, value = acc.get("Name"), acc.get("Value")
                    if name in _TASK_METRICS:
                        label, unit = _TASK_METRICS[name]
                        row[label] = float(value) * unit
                    elif name and not name.startswith("internal.") and value is not None:
                        with contextlib.suppress(TypeError, ValueError):
                            row[name] = float(value)
                stages.append(row)
    return stages


def task_timing(metas: list[dict[str, Any]]) -> dict[str, float]:
    """The tasks' ``timing`` reports summed, with their time to get their state."""
    total: dict[str, float] = {"acquire_s": sum(m.get("acquire_s", 0.0) for m in metas)}
    for meta in metas:
        for name, value in (meta.get("timing") or {}).items():
            total[name] = total.get(name, 0.0) + value
    return total


def _jobs_since(event_log: Path, seen: int) -> set[int]:
    ids = set()
    with event_log.open() as lines:
        for line in lines:
            event = json.loads(line)
            if event["Event"] == "SparkListenerJobStart" and event["Job ID"] >= seen:
                ids.add(event["Job ID"])
    return ids


def _event_log(folder: Path) -> Path:
    """The session's event log: one file (rolling, compression off: :func:`main` sets them)."""
    files = [f for f in folder.rglob("*") if f.is_file() and not f.name.startswith(".")]
    if len(files) != 1:
        raise RuntimeError(f"expected one event log in {folder}, found {files}")
    return files[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--only", default="", help="substring of the variant names")
    parser.add_argument("--backend", default="heap", choices=["heap", "rocksdb"])
    args = parser.parse_args(argv)

    from benchmarks import on_spark
    from benchmarks.run import WARMUP_EVENTS, WORK

    work = Path(tempfile.mkdtemp(prefix="statecore-spark-breakdown-"))
    logs = work / "eventlog"
    logs.mkdir()
    spark = on_spark.session(
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": logs.as_uri(),
            "spark.eventLog.rolling.enabled": "false",
            "spark.eventLog.compress": "false",
        }
    )
    workload = Workload.prepare(args.events, WORK)  # the benchmark's files, kept between runs
    warm = Workload.prepare(WARMUP_EVENTS, WORK)
    load = os.getloadavg()
    print(f"{args.events:,} events, backend {args.backend}, load {load[0]:.2f} at the start")
    for name, vectorized in VARIANTS.items():
        if args.only not in name:
            continue
        on_spark.statecore_end_to_end(
            spark, warm, args.backend, work / f"warm-{name}", vectorized=vectorized
        )
        seen = max(_jobs_since(_event_log(logs), 0), default=-1) + 1
        with driver_timers() as times:
            sample = on_spark.statecore_end_to_end(
                spark,
                workload,
                args.backend,
                work / f"run-{name}",
                vectorized=vectorized,
                verify=False,
            )
        jobs = _jobs_since(_event_log(logs), seen)
        _report(name, sample.seconds, times, stage_metrics(_event_log(logs), jobs))
    print(f"load {os.getloadavg()[0]:.2f} at the end")
    spark.stop()


_STAGE_FIELDS = ("job", "stage", "name", "tasks", "wall")


def _report(name: str, seconds: float, times: dict[str, Any], stages: list[dict[str, Any]]) -> None:
    steps = {k: v for k, v in times.items() if k != "metas"}
    print(f"\n## {name}: {seconds:.2f} s end to end")
    print("driver (wall s): " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()))
    rest_s = seconds - sum(steps.values())
    print(f"  rest (catalog connection, checkpoint planning, read): {rest_s:.2f}")
    for stage in stages:
        rest = {
            k: v for k, v in stage.items() if k not in ("job", "stage", "name", "tasks", "wall")
        }
        print(
            f"job {stage['job']} stage {stage['stage']} {stage['name']} "
            f"({stage['tasks']} tasks): wall {stage['wall']:.2f} s; tasks' sum: "
            + ", ".join(f"{k} {v:,.2f}" for k, v in sorted(rest.items()))
        )
    print(
        "Python tasks (summed s): "
        + ", ".join(f"{k} {v:.2f}" for k, v in task_timing(times["metas"]).items())
    )


if __name__ == "__main__":
    main()
