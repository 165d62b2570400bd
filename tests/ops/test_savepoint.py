"""Savepoints: self-contained copies of every table, relocatable, restorable with an empty
catalog, untouched by retention and VACUUM."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog, CheckpointKind
from statecore.checkpoint.points import METADATA_FILE, RestorePoint, load_savepoint
from statecore.config import StatecoreConfig
from statecore.errors import (
    CheckpointNotFoundError,
    ConfigError,
    CorruptSnapshotError,
    JobNotFoundError,
    MaintenanceLockedError,
)
from statecore.ops.retention import apply_retention
from statecore.ops.savepoint import restore_savepoint, take_savepoint
from statecore.query.diff import checksums
from statecore.snapshot.rewrite import table_files
from tests.ops.conftest import JOB, latest
from tests.ops.statebuilder import catalog_snapshot, files_under


def sums(point: RestorePoint) -> list[tuple[str, str, int, str]]:
    return [(c.table_kind, c.state, c.rows, c.checksum) for c in checksums(point)]


def test_a_savepoint_copies_every_table_and_describes_the_job(job: StatecoreConfig) -> None:
    source = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        saved = take_savepoint(job, catalog, JOB, name="before-deploy")
        [record] = catalog.list_savepoints(JOB)
    folder = Path(job.warehouse) / "_savepoints" / JOB / "before-deploy"
    assert saved.savepoint == str(folder) == record.path
    assert (record.name, record.reason, record.source_checkpoint) == ("before-deploy", "manual", 2)
    assert {t.table_kind for t in saved.tables} == {"keyed", "timers", "operator"}
    assert all(t.path.startswith(str(folder)) for t in saved.tables)
    assert sums(saved) == sums(source)
    metadata = json.loads((folder / METADATA_FILE).read_text())
    assert {
        k: metadata[k]
        for k in ("job", "parallelism", "max_parallelism", "source_checkpoint", "operators")
    } == {
        "job": JOB,
        "parallelism": 2,
        "max_parallelism": 128,
        "source_checkpoint": 2,
        "operators": ["main"],
    }
    assert {s["name"] for s in metadata["states"]} == {t.state for t in source.tables}
    assert all(s["schema"] and s["kind"] for s in metadata["states"])
    assert all(not t["path"].startswith("/") for t in metadata["tables"])  # relocatable


def test_a_moved_savepoint_restores_with_an_empty_catalog(
    job: StatecoreConfig, tmp_path: Path
) -> None:
    source = latest(job)
    with Catalog.connect(job.catalog_url) as catalog:
        saved = take_savepoint(job, catalog, JOB, name="sp")
    moved = tmp_path / "elsewhere" / "sp"
    shutil.copytree(str(saved.savepoint), moved)
    fresh = StatecoreConfig.resolve(home=str(tmp_path / "fresh"), env={})
    with Catalog.connect(fresh.catalog_url) as catalog:
        record = restore_savepoint(fresh, catalog, str(moved), job="clicks2")
        assert record.kind is CheckpointKind.MAINTENANCE
        assert catalog.get_job("clicks2").max_parallelism == 128
        assert {s.name for s in catalog.list_states("clicks2")} == {t.state for t in source.tables}
    restored = latest(fresh, "clicks2")
    assert all(t.path.startswith(f"{fresh.warehouse}/clicks2/") for t in restored.tables)
    assert sums(restored) == sums(source)


def test_a_savepoint_outlives_retention_and_vacuum(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        saved = take_savepoint(job, catalog, JOB, checkpoint_id=1)
        before = sums(saved)
        report = apply_retention(job, catalog, JOB, retain=1, vacuum_after=timedelta(0))
    assert report.expired == (1,) and report.files_deleted > 0
    assert sums(load_savepoint(str(saved.savepoint))) == before


def test_savepoint_of_an_unknown_job_changes_nothing(job: StatecoreConfig) -> None:
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(JobNotFoundError, match="'nope'.*clicks"):
            take_savepoint(job, catalog, "nope")
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_bad_names_targets_and_folders(job: StatecoreConfig, tmp_path: Path) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        take_savepoint(job, catalog, JOB, name="sp")
        before, files = catalog_snapshot(job), files_under(job.warehouse)
        with pytest.raises(ConfigError, match="exists already"):
            take_savepoint(job, catalog, JOB, name="sp")
        with pytest.raises(ConfigError, match="savepoint name '../x'"):
            take_savepoint(job, catalog, JOB, name="../x")
        assert catalog_snapshot(job) == before and files_under(job.warehouse) == files
        with pytest.raises(CheckpointNotFoundError, match="no _savepoint.json"):
            restore_savepoint(job, catalog, str(tmp_path))


def test_a_savepoint_waits_for_no_one(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        catalog.acquire_maintenance_lock(JOB, operation="rescale", owner="other")
        with pytest.raises(MaintenanceLockedError, match="'rescale'"):
            take_savepoint(job, catalog, JOB)
        assert catalog.list_savepoints(JOB) == []


def test_a_savepoint_name_is_unique_per_job_whatever_the_folder(
    job: StatecoreConfig, tmp_path: Path
) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        take_savepoint(job, catalog, JOB, name="sp")
        with pytest.raises(ConfigError, match="already has a savepoint named 'sp'"):
            take_savepoint(job, catalog, JOB, name="sp", target=str(tmp_path / "other"))
    assert not (tmp_path / "other").exists()


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _grow(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\0")


def _break_footer(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-8] + b"\0" * 8)  # same size, no footer length nor magic


@pytest.mark.parametrize("corrupt", [_truncate, _grow, Path.unlink], ids=["short", "long", "gone"])
def test_export_size_mismatch_fails_clearly_and_leaves_nothing(
    job: StatecoreConfig, corrupt: Any
) -> None:
    table = next(t for t in latest(job).tables if t.state == "total")
    victim = table_files(table.path, table.version)[3]
    corrupt(Path(table.path) / victim.path)
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(CorruptSnapshotError) as refused:
            take_savepoint(job, catalog, JOB, name="sp")
    message = str(refused.value)
    assert f"{table.path} version {table.version}: file {victim.path} " in message
    assert ("is missing" if corrupt is Path.unlink else "the Delta log says") in message
    assert not Path(f"{job.warehouse}/_savepoints/{JOB}/sp").exists()  # nothing partial
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_export_copies_a_file_corrupt_within_its_size_as_it_is_and_reading_it_fails(
    job: StatecoreConfig,
) -> None:
    """An export checks sizes, not footers: a file broken within its size is copied byte for
    byte, and reading the export fails on it as reading the checkpoint does."""
    table = next(t for t in latest(job).tables if t.state == "total")
    victim = table_files(table.path, table.version)[3]
    _break_footer(Path(table.path) / victim.path)
    with Catalog.connect(job.catalog_url) as catalog:
        saved = take_savepoint(job, catalog, JOB, name="sp")
    with pytest.raises(CorruptSnapshotError) as from_checkpoint:
        checksums(latest(job))
    with pytest.raises(CorruptSnapshotError) as from_export:
        checksums(saved)
    copied = next(t for t in saved.tables if t.state == "total")
    assert (
        f"{table.path} (state 'total' of operator 'main') version {table.version}: file "
        f"{victim.path} cannot be read" in str(from_checkpoint.value)
    )
    assert (
        f"{copied.path} (state 'total' of operator 'main') version {copied.version}: file "
        f"key_group={victim.key_group}/sp-" in str(from_export.value)
    )
