"""Pinned savepoints: a catalog row on a completed checkpoint's table versions, taken without
copying a file, kept by retention, log cleanup and VACUUM until deleted, restored (at the same or
another parallelism) without copying; and exports, the self-contained copies, giving the same
state."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from statecore.catalog import Catalog, CheckpointKind
from statecore.checkpoint.points import RestorePoint, checkpoint_point, resolve_point
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.errors import CheckpointNotFoundError, ConfigError
from statecore.ops.rescale import rescale, verify_rescale
from statecore.ops.retention import apply_retention
from statecore.ops.savepoint import (
    delete_savepoint,
    pin_savepoint,
    restore_savepoint,
    take_savepoint,
)
from statecore.query import connect, delta_scan
from statecore.query.diff import checksums
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL
from tests.ops.conftest import JOB, USERS, latest
from tests.ops.statebuilder import (
    Table,
    catalog_snapshot,
    files_under,
    value_rows,
    write_checkpoint,
)


def sums(point: RestorePoint) -> list[tuple[str, str, int, str]]:
    """Rows and checksum per state: independent of the table paths and the key groups."""
    return [(c.table_kind, c.state, c.rows, c.checksum) for c in checksums(point)]


def parquet_files(config: StatecoreConfig) -> set[str]:
    return {p for p in files_under(config.warehouse) if p.endswith(".parquet")}


def data_files(config: StatecoreConfig) -> set[str]:
    """The data files (not the Delta logs' checkpoints) of the warehouse."""
    return {p for p in parquet_files(config) if "_delta_log" not in p}


def test_a_pinned_savepoint_copies_no_file(job: StatecoreConfig) -> None:
    source = latest(job)
    files = files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        pinned = pin_savepoint(job, catalog, JOB, name="before-deploy")
        [record] = catalog.list_savepoints(JOB)
        found = resolve_point(catalog, JOB, "before-deploy")
    assert files_under(job.warehouse) == files  # not one file written
    assert (record.kind, record.source_checkpoint, record.reason) == ("pin", 2, "manual")
    assert (record.rows, record.bytes) == (source.total_rows, source.total_bytes)
    assert pinned.pinned and pinned.savepoint is None and found.pinned
    assert found.tables == source.tables  # the checkpoint's own table versions
    assert "pinned savepoint 'before-deploy'" in found.label


def test_a_pinned_savepoint_outlives_retention_log_cleanup_and_vacuum(
    statecore_home: StatecoreConfig,
) -> None:
    config = statecore_home

    def state(day: int) -> dict[str, Table]:
        return {"total": Table(value_rows({k: v + day for k, v in USERS.items()}))}

    write_checkpoint(config, JOB, 1, state(1))
    with Catalog.connect(config.catalog_url) as catalog:
        pin_savepoint(config, catalog, JOB, name="day-1", checkpoint_id=1)
        before = sums(checkpoint_point(catalog, JOB, 1))
    for checkpoint_id in range(2, 2 * LOG_CHECKPOINT_INTERVAL + 3):  # log checkpoints past it
        write_checkpoint(config, JOB, checkpoint_id, state(checkpoint_id))
    with Catalog.connect(config.catalog_url) as catalog:
        report = apply_retention(
            config, catalog, JOB, retain=1, vacuum_after=timedelta(0), log_grace=timedelta(0)
        )
        assert report.files_deleted > 0  # the other checkpoints' files went
        assert report.log_files_deleted == 0  # the pinned version's log entries stayed
        restored = restore_savepoint(config, catalog, "day-1", job=JOB, force=True)
        assert restored.kind is CheckpointKind.MAINTENANCE
        assert sums(checkpoint_point(catalog, JOB)) == before
        [table] = checkpoint_point(catalog, JOB).tables
    rows = dict(connect().execute(f"SELECT key, value FROM {delta_scan(table)}").fetchall())
    assert rows == {k: v + 1 for k, v in USERS.items()}  # read back by DuckDB


def test_restoring_an_export_and_a_pinned_savepoint_give_the_same_state(
    job: StatecoreConfig, tmp_path: Path
) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        source = sums(checkpoint_point(catalog, JOB, 1))
        pin_savepoint(job, catalog, JOB, name="pin-1", checkpoint_id=1)
        take_savepoint(job, catalog, JOB, name="export-1", checkpoint_id=1)
        files = data_files(job)
        restore_savepoint(job, catalog, "pin-1", job=JOB, force=True)
        from_pin = sums(checkpoint_point(catalog, JOB))
        assert data_files(job) == files  # the pin restored without copying a file
        restore_savepoint(job, catalog, "export-1", job=JOB, force=True)
        from_export = sums(checkpoint_point(catalog, JOB))
        assert len(data_files(job)) > len(files)  # the export's files were copied in
    assert from_pin == from_export == source
    assert len(source) == 5  # every state: keyed, list, plain, timers, operator


def test_a_rescale_takes_a_pinned_savepoint_and_another_parallelism_keeps_every_row(
    job: StatecoreConfig,
) -> None:
    files = files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        before = sums(latest(job))
        result = rescale(job, catalog, JOB, parallelism=4)
        assert result.savepoint is not None and files_under(job.warehouse) == files
        [record] = catalog.list_savepoints(JOB)
        assert (record.name, record.kind, record.reason) == (result.savepoint, "pin", "rescale")
        check = verify_rescale(
            catalog, JOB, savepoint=result.savepoint, parallelism=4, max_parallelism=128
        )
        assert check.rows == sum(r for _, _, r, _ in before)
        # back to the pin at a third parallelism: the same rows, nothing copied
        restore_savepoint(job, catalog, result.savepoint, job=JOB, parallelism=3)
        assert catalog.get_job(JOB).parallelism == 3
        assert sums(checkpoint_point(catalog, JOB)) == before
    assert data_files(job) == {p for p in files if p.endswith(".parquet")} - {
        p for p in files if "_delta_log" in p
    }


def test_deleting_a_pinned_savepoint_lets_vacuum_reclaim_its_files(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        pin_savepoint(job, catalog, JOB, name="old", checkpoint_id=1)
        pinned = {t.path: t.version for t in resolve_point(catalog, JOB, "old").tables}
        before = sums(checkpoint_point(catalog, JOB, 1))
        kept = apply_retention(job, catalog, JOB, retain=1, vacuum_after=timedelta(0))
        assert kept.expired == (1,) and kept.files_deleted == 0
        assert sums(resolve_point(catalog, JOB, "old")) == before
        record = delete_savepoint(catalog, JOB, "old")
        assert record.kind == "pin" and catalog.list_savepoints(JOB) == []
        reclaimed = apply_retention(job, catalog, JOB, retain=1, vacuum_after=timedelta(0))
    assert reclaimed.files_deleted > 0
    assert {v.uri for v in reclaimed.vacuumed if v.files} <= set(pinned)


def test_pinned_savepoint_bad_input_is_refused_and_changes_nothing(
    job: StatecoreConfig,
) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        pin_savepoint(job, catalog, JOB, name="sp")
        catalog.begin_checkpoint(
            JOB, 3, kind=CheckpointKind.CHECKPOINT, parallelism=2, max_parallelism=128
        )
        catalog.fail_checkpoint(JOB, 3, error="task lost")
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(ConfigError, match="job 'clicks' already has a savepoint named 'sp'"):
            pin_savepoint(job, catalog, JOB, name="sp")
        with pytest.raises(CheckpointNotFoundError, match="checkpoint 3 of job 'clicks' is FAIL"):
            pin_savepoint(job, catalog, JOB, name="failed", checkpoint_id=3)
        with pytest.raises(CheckpointNotFoundError, match="no savepoint named 'nope'.*: sp"):
            restore_savepoint(job, catalog, "nope", job=JOB)
        with pytest.raises(CheckpointNotFoundError, match="no savepoint named 'nope'.*: sp"):
            delete_savepoint(catalog, JOB, "nope")
        with pytest.raises(ConfigError, match="savepoint 'sp' is a name: give its job"):
            restore_savepoint(job, catalog, "sp")
        with pytest.raises(ConfigError, match="savepoint name '../x'"):
            pin_savepoint(job, catalog, JOB, name="../x")
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_an_export_is_a_folder_a_pin_is_not_and_names_are_shared(job: StatecoreConfig) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        exported = take_savepoint(job, catalog, JOB, name="export-a")
        pin_savepoint(job, catalog, JOB, name="pin-a")
        with pytest.raises(ConfigError, match="already has a savepoint named 'export-a'"):
            pin_savepoint(job, catalog, JOB, name="export-a")
        kinds = {s.name: s.kind for s in catalog.list_savepoints(JOB)}
        export_point = resolve_point(catalog, JOB, "export-a")
        forgotten = delete_savepoint(catalog, JOB, "export-a")
    assert kinds == {"export-a": "export", "pin-a": "pin"}
    assert export_point.savepoint == exported.savepoint and not export_point.pinned
    # forgetting an export leaves its folder: it still restores by its path
    assert forgotten.path == exported.savepoint and Path(forgotten.path).is_dir()


def test_pinned_savepoint_and_export_on_the_command_line(
    job: StatecoreConfig, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--home", job.home, *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    files = data_files(job)
    code, out, err = run("savepoint", JOB, "--name", "pin-1", "--format", "json")
    assert code == 0 and json.loads(out)["kind"] == "pin" and data_files(job) == files
    assert "nothing copied" in err
    code, out, _ = run(
        "savepoint",
        JOB,
        "--name",
        "exp-1",
        "--export",
        "--target",
        str(tmp_path),
        "--format",
        "json",
    )
    assert code == 0 and json.loads(out)["path"] == str(tmp_path / "exp-1")
    code, _, err = run("savepoint", JOB, "--name", "x", "--target", str(tmp_path))
    assert code == 2 and "add --export" in err and not (tmp_path / "x").exists()
    code, out, _ = run("savepoints", "list", "--job", JOB, "--format", "csv")
    assert code == 0 and '"pin-1","pin"' in out and '"exp-1","export"' in out
    code, out, _ = run("savepoints", "restore", "pin-1", "--job", JOB, "--format", "json")
    assert code == 0 and json.loads(out)["kind"] == "MAINTENANCE" and data_files(job) == files
    code, out, _ = run("savepoints", "delete", "pin-1", "--job", JOB, "--format", "json")
    assert code == 0 and json.loads(out)["savepoint"] == "pin-1"
    code, _, err = run("savepoints", "delete", "pin-1", "--job", JOB)
    assert code == 2 and "no savepoint named 'pin-1'" in err and "exp-1" in err
