"""The Java Flink side of the benchmark (``benchmarks/flink_java.py``, ``benchmarks/flink/``) and
the verification every variant's output goes through: the running sum's and the window sum's.

The Java runs are real: Maven builds the job (Flink 2.3.0 from Maven Central, once, into
``build/flink-bench/``) and a JVM runs it on Flink's MiniCluster on a small workload."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from benchmarks import flink_java, windows
from benchmarks.workload import VerificationError, Workload

EVENTS = 3_000


@pytest.fixture(scope="module")
def workloads(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workload, Workload]:
    root = tmp_path_factory.mktemp("bench")
    return Workload.prepare(EVENTS, root), Workload.prepare(500, root)


@pytest.fixture
def bench_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(flink_java, "BENCH_DATA", tmp_path / "bench")
    return tmp_path / "bench"


def _window_rows(workload: Workload) -> pa.Table:
    """The right answer, computed independently of the reference's code path."""
    size = windows.window_ms(workload.events)
    totals: dict[tuple[str, int], int] = {}
    table = workload.table().to_pydict()
    for key, value, seq in zip(table["key"], table["value"], table["seq"]):
        start = seq // size * size
        totals[key, start] = totals.get((key, start), 0) + value
    return pa.table(
        {
            "key": [k for k, _ in totals],
            "window_start": [s for _, s in totals],
            "total": list(totals.values()),
        }
    )


def test_flink_bench_events_csv_holds_the_workload_in_seq_order(
    workloads: tuple[Workload, Workload], bench_data: Path
) -> None:
    workload, _ = workloads
    path = flink_java.events_csv(workload)
    assert path.parent == bench_data
    read = pacsv.read_csv(path, pacsv.ReadOptions(column_names=["key", "value", "seq"]))
    assert read.column("seq").to_pylist() == list(range(EVENTS))
    assert read.sort_by("seq").equals(workload.table().sort_by("seq").cast(read.schema))
    mtime = path.stat().st_mtime_ns
    assert flink_java.events_csv(workload) == path and path.stat().st_mtime_ns == mtime  # once


def test_flink_bench_window_verification_catches_every_kind_of_wrong_output(
    workloads: tuple[Workload, Workload],
) -> None:
    workload, _ = workloads
    right = _window_rows(workload)
    reference = windows.reference(workload)
    reference.check("right", right)
    assert reference.windows == right.num_rows and reference.total == sum(
        workload.table().column("value").to_pylist()
    )

    totals = right.column("total").to_pylist()
    wrong_total = right.set_column(2, "total", pa.array([totals[0] + 1, *totals[1:]]))
    starts = right.column("window_start").to_pylist()
    size = reference.size
    # a total moved to the next window: the sum of totals still holds, the checksum does not
    moved = right.set_column(
        1, "window_start", pa.array([starts[0] + size if starts[0] < size else 0, *starts[1:]])
    )
    off_grid = right.set_column(1, "window_start", pa.array([starts[0] + 1, *starts[1:]]))
    missing = right.slice(1)
    for label, table in [("total", wrong_total), ("moved", moved), ("grid", off_grid),
                         ("missing", missing)]:  # fmt: skip
        with pytest.raises(VerificationError, match=label):
            reference.check(label, table)


def test_flink_bench_missing_java_or_maven_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    with pytest.raises(flink_java.FlinkUnavailable, match="java and mvn not found on PATH"):
        flink_java.build()


def test_flink_bench_output_of_no_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="wrote no output"):
        flink_java.read_output(tmp_path, ["key", "value", "new_sum"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("job", "backend"),
    # one Java run in the suite (a MiniCluster takes 30 to 140 s here); the benchmark verifies
    # every variant on every run: sum-rocksdb and window-hashmap, too
    [("sum", "hashmap")],
)
def test_flink_bench_java_flink_job_is_verified(
    workloads: tuple[Workload, Workload], bench_data: Path, tmp_path: Path, job: str, backend: str
) -> None:
    workload, warm = workloads
    size = windows.window_ms(workload.events)
    sample, output = flink_java.run(
        workload, warm, job=job, backend=backend, workdir=tmp_path / "run", window_ms=size
    )
    assert sample.variant == flink_java.variant_name(job, backend)
    assert sample.events == EVENTS and sample.seconds > 0
    assert sample.peak_rss and "JVM" in sample.extra["memory"]
    assert sample.extra["final_checkpoint_seconds"] > 0  # the final checkpoint was taken
    if job == "sum":
        workload.reference.check_output(sample.variant, output, EVENTS)
        with pytest.raises(VerificationError):  # the harness's check is not vacuous
            workload.reference.check_output(sample.variant, output.slice(1), EVENTS)
    else:
        windows.reference(workload).check(sample.variant, output)
        assert output.num_rows == _window_rows(workload).num_rows
    assert (tmp_path / "run" / "checkpoints").is_dir()


def test_flink_bench_statecore_window_operator_matches_the_reference(
    workloads: tuple[Workload, Workload],
) -> None:
    """The window operator the benchmark runs on Spark, here through the harness on the same
    events: its rows pass the check the Spark and Java runs go through."""
    from collections import namedtuple

    from statecore.testing import KeyedProcessFunctionHarness

    workload, _ = workloads
    event = namedtuple("event", "key value seq")
    events = [event(*row.values()) for row in workload.table().to_pylist()]
    size = windows.window_ms(workload.events)
    with KeyedProcessFunctionHarness(windows.window_operator(size), key="key") as harness:
        rows = harness.process_elements(events, timestamps=[e.seq for e in events])
        rows += harness.end_input()
    output = pa.table(
        {name: [row[i] for row in rows] for i, name in enumerate(["key", "window_start", "total"])}
    )
    windows.reference(workload).check("statecore window operator", output)
