"""statecore on a Spark standalone cluster: executors in processes of their own (one core each
on two workers), so what only a cluster shows is real here: tasks of one run on two executors,
state kept warm per executor, live lookups answered by the executor holding the key, a worker
lost mid-run, a driver killed mid-commit. Each run is a driver subprocess on the session's
cluster (:mod:`tests.cluster.job`); its outcome is read back here with DuckDB (state through
``statecore.query.open_views``, the output table) and compared with the pandas expectation a
clean ``local[2]`` run of the same job is tested equal to (``tests/faults``)."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from tests.faults.scenario import (
    JOB,
    differences,
    events,
    expected_outcome,
    read_outcome,
)

from .job import executor_of, read_probes

# A scenario's drivers get DRIVER_TIMEOUT each: room for two beyond pytest's 10 minutes.
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1200)]


def lost_or_doubled(
    home: Path,
    inputs: tuple[int, ...],
    *,
    completed: tuple[int, ...] | None = None,
    output_from: int | None = None,
) -> list[str]:
    """What the job's state and output at ``home`` lost or doubled against the expectation
    after the checkpoints of ``inputs`` (:func:`~tests.faults.scenario.events`), and which of
    ``completed`` (default: ``inputs``) did not complete. ``output_from``: only the output rows
    of that input on are expected (a job restored from a savepoint)."""
    actual = read_outcome(StatecoreConfig.resolve(home=str(home), env={}))
    expected = expected_outcome(inputs)
    if output_from is not None:
        expected = dataclasses.replace(
            expected, output=[r for r in expected.output if r[1] >= output_from * 1000]
        )
    found = differences(dataclasses.replace(actual, statuses=expected.statuses), expected)
    return found + [
        f"checkpoint {c} is not COMPLETED: {actual.statuses}"
        for c in (inputs if completed is None else completed)
        if actual.statuses.get(c) != "COMPLETED"
    ]


def executors(probes: list[dict[str, Any]]) -> set[str]:
    return {p["executor"] for p in probes}


def test_cluster_batch_runs_rescale_and_savepoint_restore_match_local(
    drive: Any, tmp_path: Path
) -> None:
    """Per record and vectorized, heap and RocksDB, at parallelism 2, 3 and 4, a rescale and a
    savepoint restore: every run's tasks on both executors, state and output exactly once."""
    a, b, c = (tmp_path / name for name in ("a", "b", "c"))
    savepoint = b / "warehouse" / "_savepoints" / JOB / "before-deploy"
    heap = {"home": str(a), "api": "record", "backend": "heap", "parallelism": 2}
    rocks = {"home": str(b), "api": "vector", "backend": "rocksdb", "parallelism": 3}
    runs = [
        {**heap, "checkpoint": 1},
        {**heap, "checkpoint": 2},
        {"home": str(a), "rescale": 3},
        {**heap, "parallelism": 3, "checkpoint": 3},
        {**rocks, "checkpoint": 1},
        {**rocks, "checkpoint": 2},
        {"home": str(b), "savepoint": "before-deploy"},
        {**rocks, "checkpoint": 3},
        {  # a new deployment (empty catalog) from the savepoint, per record, at p = 4
            "home": str(c), "api": "record", "backend": "rocksdb", "parallelism": 4,
            "checkpoint": 3, "restore_from": str(savepoint),
        },
    ]  # fmt: skip
    driver = drive({"scenario": "batch", "runs": runs})
    result = driver.result()
    print(f"\nbatch on the cluster: {driver.seconds:.1f} s (session {result['session_seconds']} s)")
    for step in result["steps"]:
        print(f"  {step}")

    assert lost_or_doubled(a, (1, 2, 3)) == []
    assert lost_or_doubled(b, (1, 2, 3)) == []
    assert lost_or_doubled(c, (1, 2, 3), completed=(3,), output_from=3) == []
    probes = read_probes(tmp_path / "probes")
    assert len(probes) == 2 + 2 + 3 + 3 + 3 + 3 + 4
    assert executors(probes) == {"0", "1"}, probes  # two executor processes ran the tasks


MICRO_BATCHES = 10


def test_cluster_stream_keeps_state_warm_per_executor_and_serves_live_lookups(
    drive: Any, tmp_path: Path
) -> None:
    """A RocksDB stream at parallelism 2 over ten micro-batches: state and output exactly once;
    how many tasks continued warm on each executor (the share is reported, not asserted:
    Spark places the tasks); each live lookup answered by the process that ran the key's
    subtask last (its warm state host), in the executor that holds it."""
    source = tmp_path / "input"
    source.mkdir()
    for c in range(1, MICRO_BATCHES + 1):  # one file per micro-batch, in order
        path = source / f"part-{c:02d}.json"
        events(c).to_json(path, orient="records", lines=True)
        os.utime(path, (1_700_000_000 + c, 1_700_000_000 + c))
    home = tmp_path / "home"
    users = sorted(events(1)["user"].unique().tolist())
    driver = drive(
        {
            "scenario": "stream",
            "home": str(home),
            "input": str(source),
            "checkpoint_location": str(tmp_path / "spark-checkpoint"),
            "parallelism": 2,
            "backend": "rocksdb",
            "users": users,
        }
    )
    result = driver.result()

    inputs = tuple(range(1, MICRO_BATCHES + 1))
    assert lost_or_doubled(home, inputs, completed=tuple(range(MICRO_BATCHES))) == []
    probes = read_probes(tmp_path / "probes")
    assert len(probes) == 2 * MICRO_BATCHES
    with Catalog.connect(StatecoreConfig.resolve(home=str(home), env={}).catalog_url) as catalog:
        metrics = [c.metrics for c in catalog.list_checkpoints(JOB)]
    assert sum(m["warm_tasks"] for m in metrics) == sum(p["warm"] for p in probes)
    per_executor = {  # tasks, warm, and the cold ones' key groups reopened locally / ingested
        e: {
            "tasks": len(ran),
            "warm": sum(p["warm"] for p in ran),
            "reopened_key_groups": sum(p["restore"].get("reused_key_groups", 0) for p in ran),
            "ingested_key_groups": sum(p["restore"].get("ingested_key_groups", 0) for p in ran),
        }
        for e in sorted(executors(probes))
        if (ran := [p for p in probes if p["executor"] == e and p["checkpoint"] > 0])
    }
    print(
        f"\nstream on the cluster: {driver.seconds:.1f} s (session {result['session_seconds']} s, "
        f"query {result['stream_seconds']} s); after micro-batch 0, per executor: {per_executor}; "
        f"placements (micro-batch, subtask, executor, warm): "
        f"{[(p['checkpoint'], p['subtask'], p['executor'], p['warm']) for p in probes]}"
    )

    expected = expected_outcome(inputs).total
    last = {p["subtask"]: p for p in probes if p["checkpoint"] == MICRO_BATCHES - 1}
    servers = {int(s): e for s, e in result["servers"].items()}
    assert {s: (e["pid"], e["executor"]) for s, e in servers.items()} == {
        s: (p["pid"], p["executor"]) for s, p in last.items()
    }  # each range is served by the process (the subtask's host) that ran its subtask last
    assert all(e["host"] == "127.0.0.1" for e in servers.values())
    answers = [(a["key"], a["live"], a["value"], a["fallback"]) for a in result["lookups"]]
    assert answers == [(u, True, expected[u], None) for u in users]
    assert {a["executor"] for a in result["lookups"]} == {e["executor"] for e in servers.values()}


def wait_for(what: str, found: Any, driver: Any, timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := found()):
        if driver.process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{what} never happened:\n{driver.logs()}")
        time.sleep(0.1)
    return value


def test_cluster_worker_lost_mid_run_loses_and_doubles_nothing(
    two_workers: Any, drive: Any, tmp_path: Path
) -> None:
    """SIGKILL a worker with its executor while its task is in the run: Spark reruns the task
    on the other executor and the run completes (or fails, and a retry of the same checkpoint
    completes it); nothing lost, nothing doubled."""
    cluster = two_workers
    home, pause = tmp_path / "home", tmp_path / "pause"
    pause.mkdir()
    run = {"scenario": "run", "home": str(home), "api": "record", "backend": "heap",
           "parallelism": 2}  # fmt: skip
    driver = drive({**run, "checkpoints": [1, 2], "pause": str(pause)})

    def two_paused() -> list[Path] | None:
        found = sorted(pause.glob("paused-*"))
        return found if len(found) >= 2 else None

    paused = wait_for("two tasks pausing at their first record", two_paused, driver)
    pid = int(paused[0].name.split("-")[2])
    victim = executor_of(pid)["executor"]
    began = time.monotonic()
    cluster.kill_worker(cluster.worker_of_pid(pid))
    (pause / "go").touch()
    returncode = driver.wait()
    print(f"\nworker lost: the run ended {time.monotonic() - began:.1f} s after the kill "
          f"(returncode {returncode}); driver {driver.seconds:.1f} s")  # fmt: skip
    if returncode != 0:  # failed cleanly: Airflow retries the run
        drive({**run, "checkpoints": [1, 2], "retry_for": 30}).result()

    assert lost_or_doubled(home, (1, 2)) == []
    probes = read_probes(tmp_path / "probes")
    assert {p["executor"] for p in probes} - {victim}, probes
    assert victim not in {p["executor"] for p in probes}  # the lost task ran elsewhere


def test_cluster_driver_killed_mid_commit_retry_loses_and_doubles_nothing(
    drive: Any, tmp_path: Path
) -> None:
    """SIGKILL the driver after the first state table of checkpoint 2 committed (the Delta
    commit done, the rest not); a retry (a new driver, the same checkpoint id, as Airflow
    retries the task) completes it and the next: nothing lost, nothing doubled."""
    home, marker = tmp_path / "home", tmp_path / "fired"
    run = {"scenario": "run", "home": str(home), "api": "vector", "backend": "rocksdb",
           "parallelism": 3}  # fmt: skip
    killed = drive(
        {**run, "checkpoints": [1, 2]},
        STATECORE_FAULT_POINT="commit:keyed:total:after:2",
        STATECORE_FAULT_MARKER=str(marker),
    )
    assert killed.wait() == -signal.SIGKILL, killed.logs()
    assert marker.read_text().startswith("commit:keyed:total:after:2")
    retry = drive({**run, "checkpoints": [2, 3], "retry_for": 30})
    retry.result()
    print(f"\ndriver killed mid-commit after {killed.seconds:.1f} s; retry {retry.seconds:.1f} s")
    assert lost_or_doubled(home, (1, 2, 3)) == []
