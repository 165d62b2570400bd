"""Maintenance checkpoints are fenced as runs are: a TTL cleanup, rescale or restore whose lease
is taken over mid-way is refused with ConcurrentRunError and leaves the job at its last
completed checkpoint (the catalog's, and the heads of the tables it had not reached yet); a
failure of the catalog while marking the checkpoint FAILED never hides the error that failed
it. Real Delta tables and a real catalog (``tests/ops/conftest.py``'s job), no Spark."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from deltalake import DeltaTable

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus, TableVersion
from statecore.checkpoint.lock import commit_maintenance_checkpoint, maintenance_lock
from statecore.config import StatecoreConfig
from statecore.errors import ConcurrentRunError
from statecore.ops.rescale import rescale
from statecore.ops.savepoint import restore_savepoint, take_savepoint
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.snapshot import Fence
from statecore.snapshot.rewrite import commit_files, table_layout
from statecore.ttl.time import ManualTimeProvider
from tests.ops.conftest import JOB, TTL_MS, latest

TAKER = "other-host:1:abcd1234"


def take_over(catalog: Catalog) -> int:
    """Another writer takes the job's lease (as after `statecore unlock`): its epoch."""
    catalog.release_maintenance_lock(JOB)
    taken = catalog.acquire_lease(JOB, operation="run 3", owner=TAKER, timeout=timedelta(minutes=5))
    return taken.epoch


def taken_over_at(catalog: Catalog, message: str) -> Callable[[str], None]:
    """A progress callback that lets another writer take the job over at ``message``."""

    def progress(line: str) -> None:
        if message in line and catalog.maintenance_lock(JOB).owner != TAKER:  # type: ignore[union-attr]
            take_over(catalog)

    return progress


def heads(tables: tuple[TableVersion, ...]) -> dict[str, int]:
    return {t.path: DeltaTable(t.path).version() for t in tables}


def test_fenced_maintenance_ttl_cleanup_taken_over_midway_is_refused(job: StatecoreConfig) -> None:
    before = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(ConcurrentRunError, match="lease of epoch 1 was lost"):
            ttl_cleanup(
                job,
                catalog,
                JOB,
                time_provider=ManualTimeProvider(20_000 + TTL_MS + 20),
                vacuum_after=None,
                progress=taken_over_at(catalog, "table 2/"),
            )
        assert catalog.latest_checkpoint(JOB).checkpoint_id == 2  # type: ignore[union-attr]
        assert catalog.maintenance_lock(JOB).owner == TAKER  # type: ignore[union-attr]
        maintenance = [
            c for c in catalog.list_checkpoints(JOB) if c.kind is CheckpointKind.MAINTENANCE
        ]
        assert all(c.status is not CheckpointStatus.COMPLETED for c in maintenance)
    assert latest(job) == before
    assert heads(before.tables) == {t.path: t.version for t in before.tables}


def test_fenced_maintenance_savepoint_restore_taken_over_commits_nothing(
    job: StatecoreConfig,
) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        taken = take_savepoint(job, catalog, JOB, checkpoint_id=1)
        catalog.release_maintenance_lock(JOB)
        before = latest(job)
        with pytest.raises(ConcurrentRunError, match="lost"):
            restore_savepoint(
                job,
                catalog,
                taken.savepoint or "",
                force=True,
                progress=taken_over_at(catalog, "table 1/"),
            )
        [failed] = [
            c for c in catalog.list_checkpoints(JOB) if c.kind is CheckpointKind.MAINTENANCE
        ]
        assert failed.status is CheckpointStatus.FAILED and "ConcurrentRunError" in (
            failed.error or ""
        )
    assert latest(job) == before
    assert heads(before.tables) == {t.path: t.version for t in before.tables}


def test_fenced_maintenance_rescale_taken_over_between_its_commits_is_refused(
    job: StatecoreConfig,
) -> None:
    before = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(ConcurrentRunError, match="lost"):
            rescale(
                job,
                catalog,
                JOB,
                parallelism=3,
                max_parallelism=256,
                progress=taken_over_at(catalog, f"restore {JOB}: table 3/"),  # 1, 2 committed
            )
        record = catalog.get_job(JOB)
        assert (record.parallelism, record.max_parallelism) == (2, 128)
        assert catalog.latest_checkpoint(JOB).checkpoint_id == 2  # type: ignore[union-attr]
    after = latest(job)
    assert after == before and after.max_parallelism == 128
    versions = {t.path: t.version for t in before.tables}
    moved = [path for path, head in heads(before.tables).items() if head != versions[path]]
    assert len(moved) == 2  # committed before the takeover: no completed checkpoint names them


def test_fenced_maintenance_lease_lost_before_completion_is_not_completed(
    job: StatecoreConfig,
) -> None:
    before = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        with maintenance_lock(catalog, JOB, "test") as lease:

            def commit(checkpoint_id: int, fence: Fence) -> list[TableVersion]:
                assert fence.epoch == lease.epoch
                take_over(catalog)  # after the Delta commits, before the completion
                return list(before.tables)

            with pytest.raises(ConcurrentRunError, match="lost"):
                commit_maintenance_checkpoint(
                    catalog,
                    JOB,
                    lease=lease,
                    base=catalog.latest_checkpoint(JOB),
                    parallelism=2,
                    max_parallelism=128,
                    commit=commit,
                )
        assert catalog.latest_checkpoint(JOB).checkpoint_id == 2  # type: ignore[union-attr]
        assert catalog.highest_checkpoint_id(JOB) == 10**18 + 1
        assert catalog.checkpoint_status(JOB, 10**18 + 1) is CheckpointStatus.FAILED


def test_fenced_maintenance_failing_catalog_keeps_the_original_error(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        with maintenance_lock(catalog, JOB, "test") as lease:

            def commit(checkpoint_id: int, fence: Fence) -> list[TableVersion]:
                catalog.delete_checkpoint(JOB, checkpoint_id)  # marking it FAILED fails now
                raise ValueError("the rewrite of key group 7 failed")

            with pytest.raises(ValueError, match="key group 7") as raised:
                commit_maintenance_checkpoint(
                    catalog,
                    JOB,
                    lease=lease,
                    base=catalog.latest_checkpoint(JOB),
                    parallelism=2,
                    max_parallelism=128,
                    commit=commit,
                )
        assert "could not be marked FAILED" in "\n".join(raised.value.__notes__)
        assert catalog.latest_checkpoint(JOB).checkpoint_id == 2  # type: ignore[union-attr]


def test_fenced_maintenance_commit_refused_in_a_table_a_newer_writer_committed(
    job: StatecoreConfig,
) -> None:
    """The epoch a commit carries in the Delta log refuses an older writer's commit, which
    would otherwise restore the table to its base version first (undoing the newer one's)."""
    [total] = [t for t in latest(job).tables if t.state == "total" and t.table_kind == "keyed"]
    layout = table_layout(total.path, total.version)
    key_group = min(total.key_groups)

    def commit(checkpoint_id: int, epoch: int) -> int:
        return commit_files(
            total.path,
            layout,
            [],
            replaced={key_group},
            base_version=total.version,
            app_id=f"{JOB}/main/total",
            checkpoint_id=checkpoint_id,
            fence=Fence(JOB, epoch),
        )

    newer = commit(10**18 + 1, 5)
    assert DeltaTable(total.path).transaction_version(f"statecore-epoch:{JOB}") == 5
    with pytest.raises(ConcurrentRunError, match="carries epoch 5 of a newer writer"):
        commit(10**18 + 2, 4)
    assert DeltaTable(total.path).version() == newer
