"""Savepoints, maintenance locks and expired checkpoints in the catalog (SQLite and Postgres)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from statecore.catalog import (
    Catalog,
    CheckpointKind,
    CheckpointStatus,
    SavepointRecord,
    TableVersion,
)
from statecore.errors import (
    CheckpointNotFoundError,
    ConfigError,
    JobNotFoundError,
    MaintenanceLockedError,
)

JOB = "clicks"


@pytest.fixture
def job_catalog(catalog: Catalog) -> Catalog:
    catalog.ensure_job(JOB, parallelism=2, max_parallelism=128)
    return catalog


def _savepoint(name: str, *, job: str = JOB) -> SavepointRecord:
    return SavepointRecord(
        job=job,
        name=name,
        path=f"/sp/{name}",
        reason="manual",
        source_checkpoint=3,
        parallelism=2,
        max_parallelism=128,
        rows=10,
        bytes=1000,
        created_at=datetime.now(UTC),
    )


def _complete(catalog: Catalog, checkpoint_id: int) -> None:
    catalog.begin_checkpoint(
        JOB, checkpoint_id, kind=CheckpointKind.CHECKPOINT, parallelism=2, max_parallelism=128
    )
    table = TableVersion(
        operator="main",
        state="total",
        table_kind="keyed",
        path="/wh/t",
        version=checkpoint_id,
        rows=1,
        bytes=10,
        key_groups={1: (1, 10)},
    )
    catalog.complete_checkpoint(JOB, checkpoint_id, tables=[table])


def test_savepoints_are_recorded_listed_and_named_uniquely(job_catalog: Catalog) -> None:
    catalog = job_catalog
    catalog.ensure_job("other", parallelism=1, max_parallelism=128)
    first = catalog.add_savepoint(_savepoint("a"))
    catalog.add_savepoint(_savepoint("b"))
    catalog.add_savepoint(_savepoint("a", job="other"))
    assert catalog.get_savepoint(JOB, "a") == first
    assert [s.name for s in catalog.list_savepoints(JOB)] == ["a", "b"]
    assert [(s.job, s.name) for s in catalog.list_savepoints()] == [
        (JOB, "a"),
        (JOB, "b"),
        ("other", "a"),
    ]
    with pytest.raises(ConfigError, match="already has a savepoint named 'a'"):
        catalog.add_savepoint(_savepoint("a"))
    with pytest.raises(CheckpointNotFoundError, match="no savepoint named 'zz'.*a, b"):
        catalog.get_savepoint(JOB, "zz")
    with pytest.raises(JobNotFoundError):
        catalog.add_savepoint(_savepoint("x", job="nope"))


def test_maintenance_lock_is_exclusive_and_named(job_catalog: Catalog) -> None:
    catalog = job_catalog
    lock = catalog.acquire_maintenance_lock(JOB, operation="ttl-cleanup", owner="host:1")
    assert catalog.maintenance_lock(JOB) == lock
    with pytest.raises(MaintenanceLockedError, match="'ttl-cleanup' \\(host:1\\).*unlock"):
        catalog.acquire_maintenance_lock(JOB, operation="rescale", owner="host:2")
    assert catalog.release_maintenance_lock(JOB, owner="host:2") is None  # not its lock
    assert catalog.maintenance_lock(JOB) == lock
    assert catalog.release_maintenance_lock(JOB, owner="host:1") == lock
    assert catalog.maintenance_lock(JOB) is None
    catalog.acquire_maintenance_lock(JOB, operation="rescale", owner="host:2")


def test_a_stale_lock_is_taken_over(job_catalog: Catalog) -> None:
    catalog = job_catalog
    catalog.acquire_maintenance_lock(JOB, operation="savepoint", owner="dead")
    with pytest.raises(MaintenanceLockedError):
        catalog.acquire_maintenance_lock(
            JOB, operation="x", owner="me", stale_after=timedelta(hours=1)
        )
    taken = catalog.acquire_maintenance_lock(
        JOB, operation="x", owner="me", stale_after=timedelta(0)
    )
    assert catalog.maintenance_lock(JOB) == taken


def test_only_one_of_two_concurrent_lockers_wins(job_catalog: Catalog, catalog_url: str) -> None:
    results: list[str] = []

    def lock(owner: str) -> None:
        with Catalog.connect(catalog_url) as own:
            try:
                own.acquire_maintenance_lock(JOB, operation="op", owner=owner)
                results.append("won")
            except MaintenanceLockedError:
                results.append("lost")

    threads = [threading.Thread(target=lock, args=(f"t{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["lost", "won"]


def test_expired_checkpoints_keep_their_id_and_replay(job_catalog: Catalog) -> None:
    catalog = job_catalog
    for checkpoint_id in (1, 2, 3):
        _complete(catalog, checkpoint_id)
    [expired] = catalog.expire_checkpoints(JOB, [1])
    assert expired.status is CheckpointStatus.EXPIRED and expired.tables == ()
    assert catalog.get_checkpoint(JOB, 1).status is CheckpointStatus.EXPIRED
    again = catalog.begin_checkpoint(
        JOB, 1, kind=CheckpointKind.CHECKPOINT, parallelism=2, max_parallelism=128
    )
    assert again.status is CheckpointStatus.EXPIRED  # a replay: nothing to do
    with pytest.raises(ConfigError, match="latest completed"):
        catalog.expire_checkpoints(JOB, [3])
    with pytest.raises(ConfigError, match="only a COMPLETED"):
        catalog.expire_checkpoints(JOB, [2, 1])
    assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.COMPLETED  # all or nothing
    assert catalog.latest_checkpoint(JOB).checkpoint_id == 3  # type: ignore[union-attr]
