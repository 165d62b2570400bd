"""Every kill point of a run, once: SIGKILL there, recover as a retry would, compare with a clean
run: 0 updates lost, 0 doubled (state read back with DuckDB, output table too).

Every point runs on the main combination (per-record API, heap, SQLite, the driver killed at
checkpoint 2 of 3); the task points also with the Python worker killed (Spark retries the
task), and a few points on the first checkpoint. A diagonal covers the vectorized API, RocksDB
and Postgres at several points each, and changelog checkpoints (change files committed, the
catalog not yet completed; a materializing checkpoint). One case alone:
``pytest tests/faults -k "commit:keyed:total:after-driver-record-heap-sqlite-cp2"``.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from .harness import Case, run_case
from .scenario import differences, read_outcome

pytestmark = pytest.mark.spark

MAIN = [
    Case("catalog:begin"),
    Case("task:process:2"),
    Case("task:snapshot:5"),
    Case("output:commit:before"),
    Case("output:commit:after"),
    Case("commit:keyed:seqs:before"),
    Case("commit:keyed:seqs:after"),
    Case("commit:keyed:total:after"),
    Case("commit:operator:processed:after"),
    Case("catalog:states"),
    Case("catalog:complete:before"),
    Case("catalog:complete:after"),
    Case("task:process:2", kill="worker"),
    Case("task:snapshot:5", kill="worker"),
    Case("commit:keyed:seqs:after", faulted=1),
    Case("output:commit:after", faulted=1),
]
DIAGONAL = [
    Case("task:process:2", api="vector", backend="rocksdb", catalog="postgres"),
    Case("commit:keyed:total:after", api="vector", backend="rocksdb", catalog="postgres"),
    Case("catalog:complete:before", api="vector", backend="rocksdb", catalog="postgres"),
    Case("output:commit:after", api="vector"),
    Case("task:snapshot:3", kill="worker", api="vector"),
    Case("task:snapshot:5", backend="rocksdb"),
    Case("commit:operator:processed:before", backend="rocksdb"),
    Case("catalog:begin", catalog="postgres", faulted=1),
    Case("output:commit:before", catalog="postgres"),
]
CHANGELOG = [  # killed between the change files' commit and the catalog's completion
    Case("commit:changes:total:after", backend="heap+changelog"),
    Case("catalog:complete:before", backend="heap+changelog"),
    Case("commit:changes:seqs:after", backend="rocksdb+changelog", faulted=3),
    Case("task:snapshot:3", kill="worker", backend="rocksdb+changelog"),
]


@pytest.mark.parametrize("case", MAIN + DIAGONAL + CHANGELOG, ids=str)
def test_kill_point_loses_and_doubles_nothing(
    case: Case, spark: Any, fault_home: Any, clean_outcome: Any, tmp_path: Path
) -> None:
    config = fault_home(case.catalog)
    killed = run_case(spark, config, case, tmp_path / "fired")

    assert killed.fired, f"the point {case.point} was never reached:\n{killed.log[-3000:]}"
    if case.kill == "driver":
        assert killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    else:  # the task was retried and the run completed
        assert killed.returncode == 0, killed.log[-3000:]
    assert differences(read_outcome(config), clean_outcome(case.api, case.backend)) == []
