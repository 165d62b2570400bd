"""Rescale: within the max parallelism nothing is rewritten; past it, key groups are recomputed
from the stored keys for keyed state and timers, and the state stays the same."""

from __future__ import annotations

import pytest

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.diff import checksums
from statecore.errors import ConfigError, MaintenanceLockedError
from statecore.keygroups import assign_to_key_group
from statecore.query import connect, delta_scan
from statecore.rescale import rescale
from statecore.restore_point import RestorePoint
from tests.ops.conftest import JOB, latest
from tests.ops.statebuilder import catalog_snapshot, files_under


def sums(point: RestorePoint) -> list[tuple[str, str, int, int | None, str]]:
    return [(c.table_kind, c.state, c.rows, c.keys, c.checksum) for c in checksums(point)]


def test_within_max_parallelism_nothing_is_rewritten(job: StatecoreConfig) -> None:
    before = latest(job)
    files = files_under(f"{job.warehouse}/{JOB}")
    with Catalog.connect(job.catalog_url) as catalog:
        result = rescale(job, catalog, JOB, parallelism=3)
        assert catalog.get_job(JOB).parallelism == 3
        [savepoint] = catalog.list_savepoints(JOB)
    assert (result.parallelism_before, result.parallelism, result.keyed_bytes_rewritten) == \
        (2, 3, 0)
    assert result.savepoint == savepoint.path and savepoint.reason == "rescale"
    assert latest(job) == before  # same checkpoint, same table versions
    assert files_under(f"{job.warehouse}/{JOB}") == files


def test_past_max_parallelism_key_groups_are_recomputed(job: StatecoreConfig) -> None:
    before = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        result = rescale(job, catalog, JOB, parallelism=3, max_parallelism=256)
        record = catalog.get_job(JOB)
        assert (record.parallelism, record.max_parallelism) == (3, 256)
        reasons = [s.reason for s in catalog.list_savepoints(JOB)]
    after = latest(job)
    assert after.checkpoint_id == result.checkpoint_id
    assert (after.max_parallelism, after.parallelism) == (256, 2)  # as operator state was written
    assert result.keyed_bytes_rewritten > 0 and reasons == ["rescale", "max-parallelism"]
    assert sums(after) == sums(before)
    con = connect()
    for table in after.tables:
        rows = con.execute(f"SELECT * FROM {delta_scan(table)}").to_arrow_table()
        if table.table_kind == "operator":
            assert table.key_groups.keys() == {0, 1}  # subtasks, copied as they were
            continue
        expected = [assign_to_key_group(k, 256) for k in rows.column("key").to_pylist()]
        assert rows.column("key_group").to_pylist() == expected, table.state
        assert max(table.key_groups) >= 128  # the new key groups are used
    old = {t.state: t for t in before.tables}
    assert {t.state: t.rows for t in after.tables} == {s: t.rows for s, t in old.items()}


def test_back_below_the_old_max_parallelism(job: StatecoreConfig) -> None:
    before = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        rescale(job, catalog, JOB, parallelism=2, max_parallelism=256)
        rescale(job, catalog, JOB, parallelism=1, max_parallelism=64)
    after = latest(job)
    assert after.max_parallelism == 64 and sums(after) == sums(before)
    assert max(k for t in after.tables if t.table_kind != "operator" for k in t.key_groups) < 64
    assert after.tables[0].key_groups != before.tables[0].key_groups


@pytest.mark.parametrize("parallelism, max_parallelism, message", [
    (0, None, "parallelism 0 must be at least 1"),
    (129, None, "parallelism 129 is above the max parallelism 128; to go past it, pass a "
                "larger --max-parallelism"),
    (300, 256, "parallelism 300 is above the max parallelism 256$"),
    (2, 40000, "max parallelism 40000 must be in 1..32768"),
])
def test_bad_rescales_change_nothing(job: StatecoreConfig, parallelism: int,
                                     max_parallelism: int | None, message: str) -> None:
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(ConfigError, match=message):
            rescale(job, catalog, JOB, parallelism=parallelism, max_parallelism=max_parallelism)
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_rescale_while_another_operation_holds_the_job(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        catalog.acquire_maintenance_lock(JOB, operation="ttl-cleanup", owner="other")
        before, files = catalog_snapshot(job), files_under(job.warehouse)
        with pytest.raises(MaintenanceLockedError, match="'ttl-cleanup'"):
            rescale(job, catalog, JOB, parallelism=3, max_parallelism=256)
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_a_job_without_checkpoints_only_changes_its_parallelism(
        statecore_home: StatecoreConfig) -> None:
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        catalog.ensure_job("empty", parallelism=2, max_parallelism=128)
        result = rescale(statecore_home, catalog, "empty", parallelism=4, max_parallelism=512)
        assert result.savepoint is None and result.checkpoint_id is None
        record = catalog.get_job("empty")
        assert (record.parallelism, record.max_parallelism) == (4, 512)
        assert catalog.list_checkpoints("empty") == []
