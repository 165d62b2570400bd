"""Another tool's VACUUM at retention 0 on a job's *state* tables. The job's later runs go on
(the latest versions keep their files) and a savepoint (a copy, outside the job's tables) still
restores; but the files of an older retained checkpoint are deleted, and reading them back (what
a restore of that checkpoint does) fails with ``CorruptSnapshotError`` naming the missing file
and the VACUUM the table's Delta log records, instead of a bare file-not-found. In process, no
Spark (``tests/inprocess.py``, the long stream's function)."""

from __future__ import annotations

import glob
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.errors import CorruptSnapshotError
from statecore.ops.savepoint import restore_savepoint, take_savepoint
from statecore.snapshot.reads import TableFile, read_table_files
from tests.checkpoint.test_long_stream import run_micro_batch

JOB = "vacuumed"


def _state_tables(config: StatecoreConfig) -> list[str]:
    logs = glob.glob(f"{config.warehouse}/{JOB}/**/_delta_log", recursive=True)
    return sorted(str(Path(p).parent) for p in logs)


def _files_at(path: str, version: int) -> list[TableFile]:
    actions = pa.table(DeltaTable(path, version=version).get_add_actions(flatten=True))
    return [
        TableFile(unquote(p), int(kg), 0, int(size))
        for p, kg, size in zip(
            actions.column("path").to_pylist(),
            actions.column("partition.key_group").to_pylist(),
            actions.column("size_bytes").to_pylist(),
        )
    ]


def test_other_tool_vacuum_of_state_tables_fails_reading_a_retained_checkpoint_naming_it(
    statecore_home: StatecoreConfig,
) -> None:
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        run_micro_batch(statecore_home, catalog, JOB, 0)
        taken = take_savepoint(statecore_home, catalog, JOB)
        for i in (1, 2):
            run_micro_batch(statecore_home, catalog, JOB, i)
        for table in _state_tables(statecore_home):
            DeltaTable(table).vacuum(
                retention_hours=0, enforce_retention_duration=False, dry_run=False
            )
        run_micro_batch(statecore_home, catalog, JOB, 3)  # the latest versions are whole
        [count] = [t for t in catalog.get_checkpoint(JOB, 0).tables if t.state == "count"]
        with pytest.raises(CorruptSnapshotError) as raised:
            for _ in read_table_files(
                count.path, _files_at(count.path, count.version), label="checkpoint 0"
            ):
                pass
        restore_savepoint(statecore_home, catalog, taken.savepoint or "", force=True)
        _, record = run_micro_batch(statecore_home, catalog, JOB, 4)
    assert record.status is CheckpointStatus.COMPLETED  # the savepoint's copy was untouched
    message = str(raised.value)
    assert "is missing" in message and "another tool VACUUMed this state table" in message
    assert "VACUUM END at version" in message and "statecore retention" in message
