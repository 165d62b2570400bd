"""Two real processes on one job (each its own local Spark): a second run while the first
holds the job fails with ConcurrentRunError and the first's updates are all there; a writer
whose lease expired and was taken over fails at its next commit with nothing visible; a run
after a driver that died mid-commit rolls that checkpoint back (output included) and fails it.
On SQLite and on Postgres (``STATECORE_TEST_POSTGRES_URL``)."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.errors import CheckpointOrderError, ConcurrentRunError
from tests.catalog.conftest import catalog_url  # noqa: F401  (SQLite and Postgres)
from tests.conftest import REPO
from tests.spark import concurrent_run

pytestmark = pytest.mark.spark

JOB = "sums"
LEASE = timedelta(seconds=3)
FIRST = [("a", 1), ("b", 2), ("a", 3), ("c", 4)]
SECOND = [("a", 10), ("d", 20)]


@pytest.fixture
def config(tmp_path: Path, catalog_url: str) -> StatecoreConfig:  # noqa: F811
    return StatecoreConfig(
        home=str(tmp_path / "home"),
        catalog_url=catalog_url,
        warehouse=str(tmp_path / "warehouse"),
        lease_timeout=LEASE,
    )


def _spec(config: StatecoreConfig, checkpoint_id: int, rows: list[tuple[str, int]],
          **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "job": JOB,
        "checkpoint_id": checkpoint_id,
        "rows": rows,
        "output_table": str(Path(config.warehouse) / "_output"),
        **extra,
    }


def _start(config: StatecoreConfig, spec: dict[str, Any]) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "STATECORE_HOME": config.home,
        "STATECORE_CATALOG_URL": config.catalog_url,
        "STATECORE_WAREHOUSE": config.warehouse,
        "STATECORE_LEASE_TIMEOUT": str(LEASE.total_seconds()),
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.concurrent_run", json.dumps(spec)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for_run(config: StatecoreConfig, operation: str, proc: subprocess.Popen[str]) -> str:
    """The owner of the run's lease, once the other process holds it."""
    deadline = time.monotonic() + 300
    with Catalog.connect(config.catalog_url) as catalog:
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            if JOB in {j.name for j in catalog.list_jobs()}:
                lease = catalog.maintenance_lock(JOB)
                if lease is not None and lease.operation == operation:
                    return lease.owner
            time.sleep(0.2)
    raise AssertionError(f"the other process never held the job for {operation!r}")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()


def _state(config: StatecoreConfig) -> dict[str, int]:
    """The state of the latest completed checkpoint, read at its Delta version."""
    with Catalog.connect(config.catalog_url) as catalog:
        latest = catalog.latest_checkpoint(JOB)
    assert latest is not None
    (table,) = [t for t in latest.tables if t.state == "total"]
    data = DeltaTable(table.path, version=table.version).to_pyarrow_table()
    assert DeltaTable(table.path).version() == table.version  # nothing uncommitted on top
    return dict(zip(data.column("key").to_pylist(), data.column("value").to_pylist(), strict=True))


def _output(config: StatecoreConfig) -> list[tuple[str, int]]:
    data = DeltaTable(str(Path(config.warehouse) / "_output")).to_pyarrow_table()
    return sorted(
        zip(data.column("key").to_pylist(), data.column("total").to_pylist(), strict=True)
    )


def test_concurrent_second_run_fails_and_the_first_keeps_every_update(
    spark: Any, config: StatecoreConfig, tmp_path: Path, processes: list[Any]
) -> None:
    gate = tmp_path / "go"
    first = _start(config, _spec(config, 1, FIRST, gate=str(gate)))
    processes.append(first)
    owner = _wait_for_run(config, "run 1", first)
    with pytest.raises(ConcurrentRunError, match=rf"the run 'run 1' \({re.escape(owner)}\)"):
        concurrent_run.run(spark, _spec(config, 1, SECOND), config=config)
    with pytest.raises(ConcurrentRunError, match="'run 1'"):  # another id: the same
        concurrent_run.run(spark, _spec(config, 2, SECOND), config=config)
    gate.touch()
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert _state(config) == {"a": 4, "b": 2, "c": 4}
    assert _output(config) == [("a", 1), ("a", 4), ("b", 2), ("c", 4)]
    with Catalog.connect(config.catalog_url) as catalog:
        assert [(c.checkpoint_id, c.status) for c in catalog.list_checkpoints(JOB)] == [
            (1, CheckpointStatus.COMPLETED)
        ]
        assert catalog.maintenance_lock(JOB) is None


def _pause_between_catalog_writes(proc: Any, config: StatecoreConfig) -> None:
    """SIGSTOP ``proc`` outside a write transaction of its (SQLite) catalog: frozen inside one,
    its lease renewal would hold SQLite's database lock, a different failure than the one
    tested (a writer that stops renewing). Retried until the catalog takes a write."""
    database = config.catalog_url.removeprefix("sqlite:///")
    for _ in range(50):
        proc.send_signal(signal.SIGSTOP)
        if not config.catalog_url.startswith("sqlite"):
            return
        try:
            con = sqlite3.connect(database, timeout=0.2)
            try:
                con.execute("BEGIN IMMEDIATE")
                con.rollback()
                return
            finally:
                con.close()
        except sqlite3.OperationalError:  # locked: it was paused mid-write
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.05)
    raise AssertionError("the stale driver held the catalog's write lock 50 times")


def test_fencing_a_stale_writer_taken_over_commits_nothing(
    spark: Any, config: StatecoreConfig, tmp_path: Path, processes: list[Any]
) -> None:
    gate = tmp_path / "go"
    stale = _start(config, _spec(config, 1, FIRST, gate=str(gate)))
    processes.append(stale)
    _wait_for_run(config, "run 1", stale)
    _pause_between_catalog_writes(stale, config)  # a paused driver: it stops renewing its lease
    time.sleep(LEASE.total_seconds() + 0.5)
    run = concurrent_run.run(spark, _spec(config, 1, SECOND), config=config)
    assert run.checkpoint.status is CheckpointStatus.COMPLETED and not run.replayed
    stale.send_signal(signal.SIGCONT)
    gate.touch()
    _, err = stale.communicate(timeout=300)
    assert stale.returncode != 0 and "ConcurrentRunError" in err, err[-3000:]
    assert _state(config) == {"a": 10, "d": 20}
    assert _output(config) == [("a", 10), ("d", 20)]
    with Catalog.connect(config.catalog_url) as catalog:
        (checkpoint,) = catalog.list_checkpoints(JOB)
        assert checkpoint.status is CheckpointStatus.COMPLETED
        assert checkpoint.tables == run.checkpoint.tables


def test_crash_before_completion_is_rolled_back_and_failed_by_the_next_run_read_committed(
    spark: Any, config: StatecoreConfig, processes: list[Any]
) -> None:
    run = concurrent_run.run(spark, _spec(config, 1, FIRST), config=config)
    run.output.count()
    dead = _start(config, _spec(config, 2, SECOND, die_before_complete=True))
    processes.append(dead)
    dead.communicate(timeout=300)
    assert dead.returncode == 17  # its state tables committed, its output only recorded
    assert ("a", 14) not in _output(config)  # output is committed after the completion
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.IN_PROGRESS
        assert catalog.maintenance_lock(JOB) is not None  # a dead holder's lease
    third = concurrent_run.run(spark, _spec(config, 3, [("b", 5)]), config=config)
    assert third.checkpoint.status is CheckpointStatus.COMPLETED
    with Catalog.connect(config.catalog_url) as catalog:
        failed = catalog.get_checkpoint(JOB, 2)
    assert failed.status is CheckpointStatus.FAILED and "abandoned" in (failed.error or "")
    assert _state(config) == {"a": 4, "b": 7, "c": 4}
    assert _output(config) == [("a", 1), ("a", 4), ("b", 2), ("b", 7), ("c", 4)]
    with pytest.raises(CheckpointOrderError, match="checkpoint 2 of job 'sums' is below.*3"):
        concurrent_run.run(spark, _spec(config, 2, SECOND), config=config)
    assert concurrent_run.run(spark, _spec(config, 1, FIRST), config=config).replayed
    assert _output(config) == [("a", 1), ("a", 4), ("b", 2), ("b", 7), ("c", 4)]
