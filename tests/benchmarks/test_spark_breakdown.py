"""The Spark breakdown's sources: the event log read back, the tasks' timing summed, and the
task's timed input (``statecore.spark.executor``), which passes every batch on unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from benchmarks.spark_breakdown import stage_metrics, task_timing
from statecore.spark.task_timing import TaskTiming


def _log(path: Path, events: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def _stage(stage: int, submitted: int, completed: int, accumulables: list[dict[str, object]]):
    return {
        "Event": "SparkListenerStageCompleted",
        "Stage Info": {
            "Stage ID": stage,
            "Stage Name": "collect at runner.py:1",
            "Number of Tasks": 2,
            "Submission Time": submitted,
            "Completion Time": completed,
            "Accumulables": accumulables,
        },
    }


def test_per_record_breakdown_reads_stages_of_the_chosen_jobs(tmp_path: Path) -> None:
    log = _log(
        tmp_path / "app",
        [
            {"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0]},
            _stage(0, 0, 9_000, []),
            {"Event": "SparkListenerJobStart", "Job ID": 1, "Stage IDs": [1]},
            _stage(
                1,
                1_000,
                3_500,
                [
                    {"Name": "internal.metrics.executorRunTime", "Value": 4_000},
                    {"Name": "internal.metrics.shuffle.write.writeTime", "Value": 2_000_000_000},
                    {"Name": "internal.metrics.resultSize", "Value": 7},
                    {"Name": "sort time", "Value": "186"},
                    {"Name": "not a number", "Value": "n/a"},
                ],
            ),
        ],
    )
    (stage,) = stage_metrics(log, {1})
    assert stage == {
        "job": 1,
        "stage": 1,
        "name": "collect",
        "tasks": 2,
        "wall": 2.5,
        "run time": 4.0,
        "shuffle write": 2.0,
        "sort time": 186.0,
    }
    assert [s["stage"] for s in stage_metrics(log)] == [0, 1]


def test_per_record_breakdown_sums_the_tasks_timing() -> None:
    metas = [
        {"acquire_s": 0.5, "timing": {"input_wait_s": 1.0, "loop_s": 3.0}},
        {"acquire_s": 0.25, "timing": {"input_wait_s": 2.0, "loop_s": 4.0}},
        {"acquire_s": 0.0},
    ]
    assert task_timing(metas) == {"acquire_s": 0.75, "input_wait_s": 3.0, "loop_s": 7.0}


def test_per_record_task_timing_passes_every_batch_on() -> None:
    parts = [pa.RecordBatch.from_pylist([{"k": i}]) for i in range(3)]
    timing = TaskTiming()
    assert list(timing.inputs(iter(parts))) == parts
    assert list(TaskTiming().inputs(iter([]))) == []
    report = timing.to_json_dict()
    assert set(report) == {"input_wait_s", "loop_s", "output_write_s", "snapshot_s"}
    assert report["input_wait_s"] >= 0.0 and report["loop_s"] == 0.0
