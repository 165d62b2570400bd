"""Warm state hosts on machines other than the driver's end with their query
(:mod:`statecore.spark.host_stop`), on the executor's task code in this process (as
``test_warm_state`` runs it): an idle host reads its query's stop marker and exits when its
last checkpoint is at or below it; a host that already serves a restarted query (a later
checkpoint) stays warm; a marker that cannot be read changes nothing."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from statecore.config import StatecoreConfig
from statecore.spark.host import host_address
from statecore.spark.host_stop import POLL_ENV, publish_stop, stop_marker_uri, stopped_at

from .test_warm_host_security import JOB, cold_rows, host_pid, hosted_task
from .test_warm_state import events, run


def marker(config: StatecoreConfig) -> str:
    return stop_marker_uri(config.warehouse, JOB, "main")


def in_host_of_a_query(uri: str) -> Any:
    """A task in its host, as a stream's task runs it (with its query's stop marker)."""

    def runner(spec: Any, *args: Any) -> Iterator[pa.RecordBatch]:
        return hosted_task(dataclasses.replace(spec, host_stop_marker=uri), *args)

    return runner


def alive(pid: int) -> bool:
    """Whether the host ``pid`` still runs (one that exited may stay a zombie of this
    process, which started it as a task's worker does)."""
    try:
        return b"host_server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def wait_gone(pid: int, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POLL_ENV, "0.3")


def test_warm_host_stop_marker_of_its_stopped_query_makes_the_idle_host_exit(
    statecore_home: StatecoreConfig, host_dir: Path
) -> None:
    runner = in_host_of_a_query(marker(statecore_home))
    for checkpoint in (1, 2):
        run(statecore_home, events(checkpoint), job=JOB, checkpoint_id=checkpoint, runner=runner)
    address = host_address(JOB, "main", 0)
    pid = host_pid(address)
    time.sleep(1.5)  # idle, polling: no marker yet
    assert alive(pid)
    publish_stop(marker(statecore_home), 2)
    assert wait_gone(pid)
    assert "its query stopped after checkpoint 2" in Path(f"{address}.log").read_text()
    assert not address.exists()


def test_warm_host_stop_marker_of_an_earlier_query_leaves_the_restarted_querys_host_warm(
    statecore_home: StatecoreConfig, host_dir: Path
) -> None:
    """A marker left when the query stopped after checkpoint 1: the hosts that ran the
    restarted query's checkpoint 2 since then keep its state for checkpoint 3."""
    expected = cold_rows(statecore_home, 3)
    runner = in_host_of_a_query(marker(statecore_home))
    run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=runner)
    publish_stop(marker(statecore_home), 1)
    run(statecore_home, events(2), job=JOB, checkpoint_id=2, runner=runner)
    pid = host_pid(host_address(JOB, "main", 0))
    time.sleep(1.5)  # several polls
    assert alive(pid)
    rows, restore = run(statecore_home, events(3), job=JOB, checkpoint_id=3, runner=runner)
    assert rows == expected[2]
    assert restore["warm_tasks"] == 2


@pytest.mark.parametrize("content", [b"not json", b'{"other": 1}', None])
def test_warm_host_stop_marker_that_cannot_be_read_changes_nothing(
    statecore_home: StatecoreConfig, host_dir: Path, content: bytes | None
) -> None:
    """A marker that is not the JSON statecore writes (or a folder in its place): the host
    logs it and stays; the next task continues warm."""
    expected = cold_rows(statecore_home, 2)
    uri = marker(statecore_home)
    runner = in_host_of_a_query(uri)
    run(statecore_home, events(1), job=JOB, checkpoint_id=1, runner=runner)
    Path(uri).parent.mkdir(parents=True, exist_ok=True)
    if content is None:
        Path(uri).mkdir()
    else:
        Path(uri).write_bytes(content)
    assert stopped_at(uri) is None
    pid = host_pid(host_address(JOB, "main", 0))
    time.sleep(1.5)
    assert alive(pid)
    rows, restore = run(statecore_home, events(2), job=JOB, checkpoint_id=2, runner=runner)
    assert rows == expected[1]
    assert restore["warm_tasks"] == 2


def test_warm_host_stop_marker_is_no_table_of_the_job(statecore_home: StatecoreConfig) -> None:
    """The marker lives beside the job's tables; nothing takes it for one."""
    from statecore.snapshot.commits import job_table_uris

    before = job_table_uris(statecore_home.warehouse, JOB)
    publish_stop(marker(statecore_home), 7)
    assert stopped_at(marker(statecore_home)) == 7
    assert job_table_uris(statecore_home.warehouse, JOB) == before
