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
