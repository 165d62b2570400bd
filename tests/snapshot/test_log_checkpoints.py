"""Delta log checkpoints: every LOG_CHECKPOINT_INTERVAL commits of a snapshot table (and of an
output table), so that opening the latest version replays at most that many commits; every older
version stays readable by time travel, in delta-rs and in DuckDB."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from statecore.snapshot import SnapshotTable, write_key_group_file
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL, last_log_checkpoint, log_replay_length
from statecore.snapshot.output import OutputTable, OutputWriter
from statecore.snapshot.rewrite import TableLayout, commit_files
from tests.snapshot.test_snapshot import ROWS, duck, rows, via_deltalake


def test_a_snapshot_table_gets_a_log_checkpoint_every_interval(tmp_path: Path) -> None:
    uri = str(tmp_path / "job" / "main" / "keyed" / "last")
    table = SnapshotTable(uri, ROWS, label="job/main/last")
    version = None
    expected: dict[int, list[tuple[object, ...]]] = {}
    replays = []
    commits = 3 * LOG_CHECKPOINT_INTERVAL + 4
    for cp in range(1, commits + 1):
        kg = cp % 4
        f = write_key_group_file(uri, kg, rows((f"k{kg}", [cp])), checkpoint_id=cp, subtask=0)
        version = table.commit(
            [f],
            changed_key_groups={kg},
            base_version=version,
            app_id="job/main/last",
            checkpoint_id=cp,
        )
        expected[version] = via_deltalake(table, version)
        replays.append(log_replay_length(uri))
    assert version == commits  # version 0 created the table
    assert last_log_checkpoint(uri) == 3 * LOG_CHECKPOINT_INTERVAL
    assert max(replays) <= LOG_CHECKPOINT_INTERVAL
    assert log_replay_length(uri) == commits - 3 * LOG_CHECKPOINT_INTERVAL
    # time travel across the checkpoints: before the first, at one, after the last
    for v in (
        1,
        LOG_CHECKPOINT_INTERVAL - 1,
        LOG_CHECKPOINT_INTERVAL,
        2 * LOG_CHECKPOINT_INTERVAL + 3,
        version,
    ):
        assert duck(uri, v) == expected[v]


def test_an_output_table_gets_log_checkpoints_too(tmp_path: Path) -> None:
    uri = str(tmp_path / "out")
    schema = pa.schema([("key", pa.string()), ("total", pa.int64())])
    sink = OutputTable(uri, schema, app_id="statecore:job/main")
    for cp in range(1, 2 * LOG_CHECKPOINT_INTERVAL + 2):
        writer = OutputWriter(uri, schema, checkpoint_id=cp, subtask=0)
        writer.write(pa.record_batch({"key": [f"k{cp}"], "total": [cp]}, schema=schema))
        written = writer.close()
        assert written is not None
        assert sink.commit([written], checkpoint_id=cp)
    assert last_log_checkpoint(uri) is not None
    assert log_replay_length(uri) <= LOG_CHECKPOINT_INTERVAL


def test_maintenance_commits_get_log_checkpoints_too(tmp_path: Path) -> None:
    """The commits of operations (TTL cleanup, savepoints, materialization) go through
    ``commit_files``: a job maintained more often than it runs still opens from a recent log
    checkpoint."""
    uri = str(tmp_path / "job" / "main" / "keyed" / "last")
    commits = LOG_CHECKPOINT_INTERVAL + 3
    version = None
    for cp in range(1, commits + 1):
        f = write_key_group_file(uri, 1, rows(("k1", [cp])), checkpoint_id=cp, subtask=0)
        version = commit_files(
            uri,
            TableLayout.of(ROWS, "key_group"),
            [f],
            replaced=[1],
            base_version=version,
            app_id="job/main/last",
            checkpoint_id=cp,
        )
    assert last_log_checkpoint(uri) == LOG_CHECKPOINT_INTERVAL
    assert log_replay_length(uri) == commits - LOG_CHECKPOINT_INTERVAL
    assert duck(uri, version) == via_deltalake(SnapshotTable(uri, ROWS, label="last"), version)
