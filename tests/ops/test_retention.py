"""Retention: keep the last N checkpoints, expire the rest, VACUUM only what none retained needs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.checkpoint.points import checkpoint_point
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, MaintenanceLockedError
from statecore.ops.retention import apply_retention
from statecore.query.diff import checksums
from tests.ops.conftest import JOB, USERS, tables
from tests.ops.statebuilder import catalog_snapshot, files_under, write_checkpoint


@pytest.fixture
def five(job: StatecoreConfig) -> StatecoreConfig:
    """Checkpoints 1 to 5, and 15 that failed after 2 (so before the oldest one kept)."""
    with Catalog.connect(job.catalog_url) as catalog:
        catalog.begin_checkpoint(
            JOB, 15, kind=CheckpointKind.CHECKPOINT, parallelism=2, max_parallelism=128
        )
        catalog.fail_checkpoint(JOB, 15, error="lost executor")
    for checkpoint_id in (3, 4, 5):
        values = dict(USERS, **{f"user-{checkpoint_id}": 1000.0 * checkpoint_id})
        write_checkpoint(job, JOB, checkpoint_id, tables(values, 10_000 * checkpoint_id))
    return job


def test_keep_the_last_two(five: StatecoreConfig) -> None:
    warehouse = f"{five.warehouse}/{JOB}"
    before = files_under(warehouse)
    with Catalog.connect(five.catalog_url) as catalog:
        kept_sums = [checksums(checkpoint_point(catalog, JOB, i)) for i in (4, 5)]
        dry = apply_retention(five, catalog, JOB, retain=2, vacuum_after=timedelta(0), dry_run=True)
        assert files_under(warehouse) == before
        assert catalog.get_checkpoint(JOB, 1).status is CheckpointStatus.COMPLETED
        report = apply_retention(five, catalog, JOB, retain=2, vacuum_after=timedelta(0))
        assert report.to_dict() | {"dry_run": True} == dry.to_dict()
        assert (report.retained, report.expired, report.deleted_failed) == (
            (4, 5),
            (1, 2, 3),
            (15,),
        )
        statuses = {c.checkpoint_id: c.status for c in catalog.list_checkpoints(JOB)}
        assert statuses == {
            1: CheckpointStatus.EXPIRED,
            2: CheckpointStatus.EXPIRED,
            3: CheckpointStatus.EXPIRED,
            4: CheckpointStatus.COMPLETED,
            5: CheckpointStatus.COMPLETED,
        }  # 15 is gone
        # retained checkpoints read completely; their files were all kept
        assert [checksums(checkpoint_point(catalog, JOB, i)) for i in (4, 5)] == kept_sums
        replay = catalog.begin_checkpoint(
            JOB, 2, kind=CheckpointKind.CHECKPOINT, parallelism=2, max_parallelism=128
        )
        assert replay.status is CheckpointStatus.EXPIRED  # re-running day 2 stays a no-op
    after = files_under(warehouse)
    deleted = set(before) - set(after)
    assert report.files_deleted == len(deleted) > 0
    assert report.bytes_reclaimed == sum(before[f] for f in deleted)
    assert not any("_delta_log" in f for f in deleted)


def test_young_files_are_never_vacuumed(five: StatecoreConfig) -> None:
    before = files_under(five.warehouse)
    with Catalog.connect(five.catalog_url) as catalog:
        report = apply_retention(five, catalog, JOB, retain=1, vacuum_after=timedelta(hours=1))
    assert report.expired == (1, 2, 3, 4) and report.files_deleted == 0
    assert files_under(five.warehouse) == before


def test_bad_retention_changes_nothing(five: StatecoreConfig) -> None:
    before, files = catalog_snapshot(five), files_under(five.warehouse)
    with Catalog.connect(five.catalog_url) as catalog:
        with pytest.raises(ConfigError, match="at least 1"):
            apply_retention(five, catalog, JOB, retain=0)
        catalog.acquire_maintenance_lock(JOB, operation="savepoint", owner="other")
        locked = catalog_snapshot(five)
        with pytest.raises(MaintenanceLockedError, match="'savepoint'"):
            apply_retention(five, catalog, JOB, retain=1, vacuum_after=timedelta(0))
        assert catalog_snapshot(five) == locked
        catalog.release_maintenance_lock(JOB)
    assert catalog_snapshot(five) == before and files_under(five.warehouse) == files
