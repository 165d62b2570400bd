"""A warm state host's memory bound (:mod:`statecore.spark.host_memory`), on the executor's task
code in this process (as ``test_warm_state`` runs it): a host that a task left over its bound
exits after replying, and the subtask's next task restores in a new host with the right state;
a bound that is not a size fails the task with a clear error and loses nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.spark.host import host_address
from statecore.spark.host_memory import DEFAULT_MEMORY, MEMORY_ENV, memory_bound, resident_bytes

from .test_warm_host_security import JOB, cold_rows, host_pid, hosted_task
from .test_warm_state import events, run


def _exits(log: Path, count: int, timeout: float = 30) -> int:
    """How many times the host log at ``log`` says a host exited over its bound, waiting up to
    ``timeout`` s for ``count`` (a host exits just after it replied)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = log.read_text().count("over the bound of 1 MiB") if log.exists() else 0
        if seen >= count or time.monotonic() > deadline:
            return seen
        time.sleep(0.1)


def test_warm_host_memory_over_its_bound_exits_and_the_next_task_restores(
    statecore_home: StatecoreConfig, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a bound below any interpreter's memory, each task's host exits once it replied:
    the next task of the subtask starts a new host, which restores (not warm); state exact."""
    monkeypatch.setenv(MEMORY_ENV, "1m")
    expected = cold_rows(statecore_home, 3, parallelism=1)
    address = host_address(JOB, "main", 0)
    for checkpoint in (1, 2, 3):
        rows, restore = run(
            statecore_home,
            events(checkpoint),
            job=JOB,
            checkpoint_id=checkpoint,
            parallelism=1,
            runner=hosted_task,
        )
        assert rows == expected[checkpoint - 1]
        assert restore["warm_tasks"] == 0
        assert _exits(Path(f"{address}.log"), checkpoint) == checkpoint


def test_warm_host_memory_under_its_bound_keeps_the_state_warm(
    statecore_home: StatecoreConfig, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same runs with a bound above the host's memory: one host serves them all, warm."""
    monkeypatch.setenv(MEMORY_ENV, "64g")
    expected = cold_rows(statecore_home, 2, parallelism=1)
    run(statecore_home, events(1), job=JOB, checkpoint_id=1, parallelism=1, runner=hosted_task)
    pid = host_pid(host_address(JOB, "main", 0))
    rows, restore = run(
        statecore_home, events(2), job=JOB, checkpoint_id=2, parallelism=1, runner=hosted_task
    )
    assert rows == expected[1]
    assert restore["warm_tasks"] == 1
    assert host_pid(host_address(JOB, "main", 0)) == pid


def test_warm_host_memory_bound_that_is_not_a_size_fails_the_task_and_loses_nothing(
    statecore_home: StatecoreConfig, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = cold_rows(statecore_home, 2, parallelism=1)
    run(statecore_home, events(1), job=JOB, checkpoint_id=1, parallelism=1, runner=hosted_task)
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(ConfigError, match=r"STATECORE_HOST_MAX_MEMORY='lots' is not a memory"):
        run(statecore_home, events(2), job=JOB, checkpoint_id=2, parallelism=1, runner=hosted_task)
    monkeypatch.setenv(MEMORY_ENV, "4g")  # fixed: the checkpoint runs again, from checkpoint 1
    rows, _ = run(
        statecore_home, events(2), job=JOB, checkpoint_id=2, parallelism=1, runner=hosted_task
    )
    assert rows == expected[1]


@pytest.mark.parametrize(
    ("given", "bound"),
    [
        ({}, DEFAULT_MEMORY),
        ({MEMORY_ENV: "512m"}, 512 * 1024**2),
        ({MEMORY_ENV: "1.5G"}, int(1.5 * 1024**3)),
        ({MEMORY_ENV: "3GiB"}, 3 * 1024**3),
        ({MEMORY_ENV: "1048576"}, 1024**2),
        ({"PYSPARK_EXECUTOR_MEMORY_MB": "768"}, 768 * 1024**2),
        ({MEMORY_ENV: "1g", "PYSPARK_EXECUTOR_MEMORY_MB": "768"}, 1024**3),
    ],
)
def test_warm_host_memory_bound_from_the_environment(given: dict[str, str], bound: int) -> None:
    assert memory_bound(given) == bound


@pytest.mark.parametrize("given", ["lots", "0", "-1g", "2 gigabytes", "1x"])
def test_warm_host_memory_bound_refuses_what_is_not_a_size(given: str) -> None:
    with pytest.raises(ConfigError, match="is not a memory size"):
        memory_bound({MEMORY_ENV: given})


def test_warm_host_memory_resident_bytes_is_this_process_now() -> None:
    before = resident_bytes()
    block = bytearray(64 * 1024**2)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    assert resident_bytes() - before >= 48 * 1024**2
    del block
