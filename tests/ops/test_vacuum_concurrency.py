"""VACUUM while a checkpoint is being written, in another process, never deletes its files; nor
those of table versions committed after the latest completed checkpoint."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.ops.retention import apply_retention
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.snapshot.rewrite import table_files, vacuum
from tests.ops.slowjob import finish, run, start_paused, totals

JOB = "paused"


def test_vacuum_concurrent_with_a_checkpoint_keeps_its_files(
    statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    assert run(statecore_home, JOB, 1) == totals(1)
    process = start_paused(statecore_home, JOB, 2, tmp_path / "pause")
    try:
        with Catalog.connect(statecore_home.catalog_url) as catalog:
            assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.IN_PROGRESS
            # what `statecore ttl-cleanup JOB --vacuum-retention-hours 0` runs
            report = ttl_cleanup(statecore_home, catalog, JOB, vacuum_after=timedelta(0))
            assert report.checkpoint_id is None  # no TTL state: only the VACUUM
    finally:
        finish(process, tmp_path / "pause")
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.COMPLETED
    # checkpoint 3 restores checkpoint 2 completely: every key group of both subtasks
    assert run(statecore_home, JOB, 3) == totals(3)


def test_retention_concurrent_with_a_checkpoint_keeps_its_files(
    statecore_home: StatecoreConfig, tmp_path: Path
) -> None:
    for checkpoint_id in (1, 2):
        run(statecore_home, JOB, checkpoint_id)
    process = start_paused(statecore_home, JOB, 3, tmp_path / "pause")
    try:
        with Catalog.connect(statecore_home.catalog_url) as catalog:
            report = apply_retention(
                statecore_home, catalog, JOB, retain=1, vacuum_after=timedelta(0)
            )
            assert report.expired == (1,)
    finally:
        finish(process, tmp_path / "pause")
    assert run(statecore_home, JOB, 4) == totals(4)


def test_concurrent_vacuum_keeps_versions_committed_after_the_latest_completed_checkpoint(
    statecore_home: StatecoreConfig,
) -> None:
    """As for a run whose Delta commits landed before its catalog completion: the versions after
    the one the catalog names keep their files, whatever the retention."""
    for checkpoint_id in (1, 2, 3):
        run(statecore_home, JOB, checkpoint_id)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        first = catalog.get_checkpoint(JOB, 1).tables[0]
    second = table_files(first.path, first.version + 1)
    trusting = vacuum(first.path, [first.version], older_than=timedelta(0), dry_run=True)
    assert {f.path for f in second} & set(trusting.files)  # version 2's files, if unprotected
    kept = vacuum(
        first.path, [first.version], older_than=timedelta(0), keep_after_version=first.version
    )
    assert not {f.path for f in second} & set(kept.files)
    assert run(statecore_home, JOB, 4) == totals(4)
