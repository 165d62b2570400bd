"""Restoring a savepoint older than the job's latest checkpoint is refused unless forced: a
``state delete`` taken while the job goes on in another process, then ``savepoints restore``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog, CheckpointKind
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.errors import RestoreWouldDiscardError
from statecore.ops.savepoint import restore_savepoint
from tests.ops.slowjob import finish, run, start_paused, totals
from tests.ops.statebuilder import catalog_snapshot, files_under

JOB = "paused"
ERASED = "user-7"


def test_restore_of_a_state_delete_taken_concurrently_is_refused_unless_forced(
    statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = statecore_home
    run(config, JOB, 1)
    process = start_paused(config, JOB, 2, tmp_path / "pause")
    try:  # the erasure is taken from checkpoint 1 while checkpoint 2 is being written
        code = main(
            ["--home", config.home, "state", "delete", JOB, "--key", ERASED, "--name", "erase"]
        )
        assert code == 0, capsys.readouterr().err
    finally:
        finish(process, tmp_path / "pause")
    run(config, JOB, 3)
    folder = f"{config.warehouse}/_savepoints/{JOB}/erase"

    before, files = catalog_snapshot(config), files_under(config.warehouse)
    capsys.readouterr()
    assert main(["--home", config.home, "savepoints", "restore", folder]) == 2
    err = capsys.readouterr().err
    assert "would discard checkpoint(s) 2, 3" in err and "--force" in err, err
    assert catalog_snapshot(config) == before and files_under(config.warehouse) == files

    assert main(["--home", config.home, "savepoints", "restore", folder, "--force"]) == 0
    with Catalog.connect(config.catalog_url) as catalog:
        latest = catalog.latest_checkpoint(JOB)
        assert latest is not None and latest.kind is CheckpointKind.MAINTENANCE
    # the job goes on from the savepoint: checkpoint 1's totals without the erased key
    expected = {k: v * 2 for k, v in totals(1).items() if k != ERASED}
    expected[ERASED] = totals(1)[ERASED]
    assert run(config, JOB, 4) == expected


def test_concurrent_restore_of_the_latest_checkpoints_savepoint_needs_no_force(
    statecore_home: StatecoreConfig, capsys: Any
) -> None:
    config = statecore_home
    run(config, JOB, 1)
    assert main(["--home", config.home, "savepoint", JOB, "--name", "sp", "--export"]) == 0
    folder = f"{config.warehouse}/_savepoints/{JOB}/sp"
    with Catalog.connect(config.catalog_url) as catalog:
        restore_savepoint(config, catalog, folder)  # nothing completed since checkpoint 1
        run(config, JOB, 2)
        with pytest.raises(RestoreWouldDiscardError, match=r"checkpoint\(s\) 10+1, 2,"):
            restore_savepoint(config, catalog, folder)  # the restore itself, and checkpoint 2
        # into another job that has checkpoints: all of them would be discarded
        run(config, "other", 1)
        with pytest.raises(RestoreWouldDiscardError, match=r"job 'other'.* checkpoint\(s\) 1,"):
            restore_savepoint(config, catalog, folder, job="other")
