"""The catalog's stores and their one-row lookups, against SQLite and Postgres (conftest.py)."""

from __future__ import annotations

import pytest

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.errors import CheckpointCommitError

JOB = "clicks"
CHECKPOINT = CheckpointKind.CHECKPOINT


def _completed(catalog: Catalog, checkpoint_id: int, *, kind: CheckpointKind = CHECKPOINT) -> None:
    catalog.begin_checkpoint(JOB, checkpoint_id, kind=kind, parallelism=2, max_parallelism=128)
    catalog.complete_checkpoint(JOB, checkpoint_id, tables=[])


@pytest.fixture
def job_catalog(catalog: Catalog) -> Catalog:
    catalog.ensure_job(JOB, parallelism=2, max_parallelism=128)
    return catalog


def test_catalog_store_latent_an_expired_checkpoint_cannot_fail(job_catalog: Catalog) -> None:
    # begin_checkpoint replays an EXPIRED checkpoint as it replays a COMPLETED one; failing it
    # would turn a replay into a retry that runs its input a second time.
    _completed(job_catalog, 1)
    _completed(job_catalog, 2)
    [expired] = job_catalog.expire_checkpoints(JOB, [1])
    with pytest.raises(CheckpointCommitError, match="checkpoint 1 of job 'clicks' is EXPIRED"):
        job_catalog.fail_checkpoint(JOB, 1, error="late failure")
    assert job_catalog.get_checkpoint(JOB, 1) == expired
    replay = job_catalog.begin_checkpoint(
        JOB, 1, kind=CHECKPOINT, parallelism=2, max_parallelism=128
    )
    assert replay.status is CheckpointStatus.EXPIRED


def test_catalog_store_find_job_and_has_job_read_one_row(catalog: Catalog) -> None:
    assert catalog.find_job(JOB) is None
    assert not catalog.has_job(JOB)
    job = catalog.ensure_job(JOB, parallelism=2, max_parallelism=128)
    catalog.ensure_job("other", parallelism=1, max_parallelism=128)
    assert catalog.find_job(JOB) == job == catalog.get_job(JOB)
    assert catalog.has_job(JOB)
    assert not catalog.has_job("click")


def test_catalog_store_checkpoint_status_names_one_checkpoint(job_catalog: Catalog) -> None:
    assert job_catalog.checkpoint_status(JOB, 1) is None
    assert job_catalog.checkpoint_status("unknown", 1) is None
    job_catalog.begin_checkpoint(JOB, 1, kind=CHECKPOINT, parallelism=2, max_parallelism=128)
    assert job_catalog.checkpoint_status(JOB, 1) is CheckpointStatus.IN_PROGRESS
    job_catalog.complete_checkpoint(JOB, 1, tables=[])
    assert job_catalog.checkpoint_status(JOB, 1) is CheckpointStatus.COMPLETED
    job_catalog.begin_checkpoint(JOB, 2, kind=CHECKPOINT, parallelism=2, max_parallelism=128)
    job_catalog.fail_checkpoint(JOB, 2, error="executor lost")
    assert job_catalog.checkpoint_status(JOB, 2) is CheckpointStatus.FAILED
    assert job_catalog.checkpoint_status(JOB, 3) is None


def test_catalog_store_each_latest_has_its_own_name(job_catalog: Catalog) -> None:
    catalog = job_catalog
    assert catalog.latest_restorable(JOB) is None
    assert catalog.latest_completed_id(JOB) is None
    assert catalog.highest_completed_id(JOB) is None
    assert catalog.highest_checkpoint_id(JOB) is None
    _completed(catalog, 10)
    _completed(catalog, 7)  # completed last, with a smaller id
    _completed(catalog, 20, kind=CheckpointKind.SAVEPOINT)  # no run restores from it
    restorable = catalog.latest_restorable(JOB)
    assert restorable is not None and restorable.checkpoint_id == 7
    assert catalog.latest_checkpoint(JOB) == restorable  # the old name, same meaning
    assert catalog.latest_completed_id(JOB) == 20  # of any kind: never expired
    assert catalog.highest_completed_id(JOB) == 10  # a new run's id floor
    assert catalog.latest_checkpoint_id(JOB) == 10  # the old name, same meaning
    catalog.expire_checkpoints(JOB, [10])
    assert catalog.highest_completed_id(JOB) == 10  # an expired id still replays
    catalog.begin_checkpoint(JOB, 30, kind=CHECKPOINT, parallelism=2, max_parallelism=128)
    assert catalog.highest_checkpoint_id(JOB) == 30
    assert catalog.highest_completed_id(JOB) == 10


def test_catalog_store_list_checkpoints_last_keeps_the_largest_ids(job_catalog: Catalog) -> None:
    for checkpoint_id in (3, 1, 4, 2):
        _completed(job_catalog, checkpoint_id)
    last = job_catalog.list_checkpoints(JOB, last=2)
    assert [c.checkpoint_id for c in last] == [3, 4]
    assert [c.checkpoint_id for c in job_catalog.list_checkpoints(JOB)] == [1, 2, 3, 4]
