"""TTL cleanup: expired entries removed as a new maintenance checkpoint, per key group report,
compaction of small files, dry run and the maintenance lock."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pyarrow as pa
import pytest

from statecore.catalog import Catalog, CheckpointKind, TableVersion
from statecore.checkpoint.points import tables_by_name
from statecore.config import StatecoreConfig
from statecore.errors import MaintenanceLockedError
from statecore.ops.ttl_cleanup import expire_rows, ttl_cleanup
from statecore.query import connect, delta_scan
from statecore.snapshot.rewrite import (
    commit_files,
    partition_sizes,
    read_files,
    table_files,
    table_layout,
    write_partition_file,
)
from statecore.ttl.time import ManualTimeProvider
from tests.ops.conftest import JOB, TTL_MS, USERS, latest
from tests.ops.statebuilder import catalog_snapshot, files_under, list_rows

NOW = 20_000 + TTL_MS + 20  # entries stamped up to 20_020 have expired: users 0..20


def rows_of(table: TableVersion) -> pa.Table:
    return connect().execute(f"SELECT * FROM {delta_scan(table)}").to_arrow_table()


def test_expired_rows_are_gone_as_a_maintenance_checkpoint(job: StatecoreConfig) -> None:
    before = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        report = ttl_cleanup(
            job, catalog, JOB, time_provider=ManualTimeProvider(NOW), vacuum_after=None
        )
        record = catalog.get_checkpoint(JOB, report.checkpoint_id or 0)
    after = latest(job)
    assert record.kind is CheckpointKind.MAINTENANCE and after.checkpoint_id == record.checkpoint_id
    assert record.restored_from == before.checkpoint_id == report.base_checkpoint
    old, new = tables_by_name(before), tables_by_name(after)
    total = rows_of(new["main", "keyed", "total"])
    assert total.num_rows == len(USERS) + 1 - 21
    assert min(total.column("ttl_timestamp").to_pylist()) > NOW - TTL_MS
    seen = rows_of(new["main", "keyed", "seen"])
    assert seen.num_rows == len(USERS) + 1 - 21
    assert all(
        len(v) == 1 and len(t) == 1 and t[0] > NOW - TTL_MS
        for v, t in zip(seen.column("value").to_pylist(), seen.column("ttl_timestamp").to_pylist())
    )
    for name in (
        ("main", "keyed", "plain"),
        ("main", "timers", "timers"),
        ("main", "operator", "offsets"),
    ):
        assert new[name] == old[name]  # no TTL, one file per key group: carried forward
    by_state: dict[str, list[int]] = {}
    for k in report.key_groups:
        counts = by_state.setdefault(k.state, [0, 0, 0])
        counts[0] += k.expired
        counts[1] += k.rows_reclaimed
        counts[2] += k.bytes_reclaimed
    assert by_state["total"][:2] == [21, 21] and by_state["seen"][:2] == [41 + 21, 21]
    assert report.bytes_reclaimed == sum(c[2] for c in by_state.values()) > 0
    assert (
        sum(t.bytes for t in old.values()) - sum(t.bytes for t in new.values())
        == report.bytes_reclaimed
    )
    assert report.to_dict()["key_groups"][0].keys() >= {"state", "key_group", "rows_reclaimed"}


def test_a_dry_run_reports_and_changes_nothing(job: StatecoreConfig) -> None:
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        dry = ttl_cleanup(
            job,
            catalog,
            JOB,
            time_provider=ManualTimeProvider(NOW),
            vacuum_after=timedelta(0),
            dry_run=True,
        )
    assert dry.checkpoint_id is None and (dry.expired, dry.rows_reclaimed) == (21 + 62, 42)
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_cleanup_while_another_operation_holds_the_job(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        catalog.acquire_maintenance_lock(JOB, operation="rescale", owner="host:42")
        before, files = catalog_snapshot(job), files_under(job.warehouse)
        with pytest.raises(MaintenanceLockedError, match="'rescale' \\(host:42\\)"):
            ttl_cleanup(job, catalog, JOB, time_provider=ManualTimeProvider(NOW))
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_nothing_expired_nothing_written(job: StatecoreConfig) -> None:
    before = catalog_snapshot(job)
    with Catalog.connect(job.catalog_url) as catalog:
        report = ttl_cleanup(
            job, catalog, JOB, time_provider=ManualTimeProvider(0), vacuum_after=None
        )
    assert report.checkpoint_id is None and report.key_groups == ()
    assert catalog_snapshot(job) == before


def test_small_files_of_a_key_group_are_compacted(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        base = catalog.latest_checkpoint(JOB)
        assert base is not None
        catalog.begin_checkpoint(
            JOB,
            3,
            kind=CheckpointKind.CHECKPOINT,
            parallelism=2,
            max_parallelism=128,
            restored_from=base.checkpoint_id,
        )
        seen = next(t for t in base.tables if t.state == "seen")
        layout = table_layout(seen.path, seen.version)
        key_group = next(iter(seen.key_groups))
        [(_, rows)] = read_files(
            seen.path, [f for f in table_files(seen.path, seen.version) if f.key_group == key_group]
        )
        extra = list_rows({"user-extra": ["x"]}, {"user-extra": [99_999]})
        written = [
            write_partition_file(seen.path, layout, key_group, part, prefix="cp-3")
            for part in (rows, extra)
        ]
        version = commit_files(
            seen.path,
            layout,
            written,
            replaced={key_group},
            base_version=seen.version,
            app_id="test",
            checkpoint_id=3,
        )
        sizes = partition_sizes(seen.path, version)
        two_files = replace(
            seen,
            version=version,
            key_groups=sizes,
            rows=sum(r for r, _ in sizes.values()),
            bytes=sum(b for _, b in sizes.values()),
        )
        catalog.complete_checkpoint(
            JOB, 3, tables=[two_files if t.state == "seen" else t for t in base.tables]
        )
        report = ttl_cleanup(
            job, catalog, JOB, time_provider=ManualTimeProvider(0), vacuum_after=None
        )
    [merged] = report.key_groups
    assert (merged.state, merged.key_group, merged.files_before, merged.files_after) == (
        "seen",
        key_group,
        2,
        1,
    )
    assert merged.rows_after == merged.rows_before == rows.num_rows + 1 and merged.expired == 0
    assert latest(job).checkpoint_id == report.checkpoint_id


def test_expire_rows_of_list_state() -> None:
    rows = list_rows({"a": ["x", "y", "z"], "b": ["q"]}, {"a": [1, 5, 9], "b": [2]})
    kept, expired = expire_rows(rows, 5)
    assert expired == 3
    assert kept.to_pylist() == [{"key": "a", "namespace": "", "value": ["z"], "ttl_timestamp": [9]}]
    assert kept.schema == rows.schema
