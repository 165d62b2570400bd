"""Every kill point of a run, once: SIGKILL there, recover as a retry would, compare with a clean
run: 0 updates lost, 0 doubled (state read back with DuckDB, output table too).

Every point runs on the main combination (per-record API, heap, SQLite, the driver killed at
checkpoint 2 of 3); the task points also with the Python worker killed (Spark retries the
task), and a few points on the first checkpoint. A diagonal covers the vectorized API, RocksDB
and Postgres at several points each, and changelog checkpoints (change files committed, the
catalog not yet completed; a materializing checkpoint). One case alone:
``pytest tests/faults -k "commit:keyed:total:after-driver-record-heap-sqlite-cp2"``.

The cases run one ahead (:class:`Ahead`): while a test waits for its armed subprocess and
recovers, the next selected case's subprocess is already starting its Spark (a case is mostly a
driver JVM's start; two of them overlap on two cores). Each case keeps a home, a catalog and a
subprocess of its own, and its test checks only its own.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from statecore.config import StatecoreConfig

from .conftest import Homes
from .harness import LEASE_TIMEOUT, Case, Killed, Started, recover, start_case
from .scenario import differences, read_outcome

pytestmark = pytest.mark.spark

MAIN = [
    Case("catalog:begin"),
    Case("catalog:pending"),
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


AHEAD = 1
"""How many selected cases past the current one have their armed subprocess started."""


class Ahead:
    """The selected cases of this module in the order pytest runs them; :meth:`take` starts the
    next :data:`AHEAD` of them (the checkpoints before the faulted one on the session's Spark,
    then the armed subprocess) before it waits for the case's own subprocess. A case that fails
    to start fails (or is skipped) in its own test."""

    def __init__(self, spark: Any, cases: list[Case], homes: Homes) -> None:
        self.spark, self.cases, self.homes = spark, cases, homes
        self.started: dict[int, tuple[StatecoreConfig, Started] | BaseException] = {}

    def start(self, index: int) -> None:
        if index in self.started or index >= len(self.cases):
            return
        case = self.cases[index]
        try:
            config = self.homes.make(case.catalog, name=f"case{index}")
            marker = self.homes.root / f"case{index}-fired"
            self.started[index] = (config, start_case(self.spark, config, case, marker))
        except (Exception, pytest.skip.Exception) as exc:
            self.started[index] = exc

    def take(self, case: Case) -> tuple[StatecoreConfig, Killed]:
        index = self.cases.index(case)
        for ahead in range(index, index + AHEAD + 1):
            self.start(ahead)
        started = self.started.pop(index)
        if isinstance(started, BaseException):
            raise started
        config, job = started
        return config, job.finish()

    def close(self) -> None:
        """Kill the subprocesses of cases never taken (a failed or interrupted run)."""
        for started in self.started.values():
            if not isinstance(started, BaseException):
                started[1].finish_killed()


@pytest.fixture(scope="module")
def ahead(
    request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Ahead]:
    cases = [
        item.callspec.params["case"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    ]
    homes = Homes(tmp_path_factory.mktemp("kill-points"))
    pipeline = Ahead(spark, cases, homes)
    yield pipeline
    pipeline.close()
    homes.drop()


@pytest.mark.parametrize("case", MAIN + DIAGONAL + CHANGELOG, ids=str)
def test_kill_point_loses_and_doubles_nothing(
    case: Case,
    spark: Any,
    ahead: Ahead,
    clean_outcome: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STATECORE_LEASE_TIMEOUT", LEASE_TIMEOUT)  # as the subprocesses have it
    config, killed = ahead.take(case)

    assert killed.fired, f"the point {case.point} was never reached:\n{killed.log[-3000:]}"
    if case.kill == "driver":
        assert killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    else:  # the task was retried and the run completed
        assert killed.returncode == 0, killed.log[-3000:]
    recover(spark, config, case)
    assert differences(read_outcome(config), clean_outcome(case.api, case.backend)) == []
