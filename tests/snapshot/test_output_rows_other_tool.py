"""Delta's own maintenance by another tool (deltalake here, no Spark) on an output table: a
completed checkpoint's rows are found through the Delta log, never by file names.

Each checkpoint commits two files (two subtasks) as statecore's output commit does. Then another
tool runs ``optimize.compact()``, ``optimize.z_order``, ``vacuum`` at retention 0 with its check
off, ``restore`` or ``delete``. Every checkpoint's rows read back alone, exactly as committed,
while the log says which files hold them; otherwise the error names the checkpoint and the Delta
operation, never an empty result. DuckDB reads the whole table back: every row once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from statecore.errors import OutputRowsUnavailableError
from statecore.query import connect
from statecore.snapshot.files import table_filesystem
from statecore.snapshot.output import OutputFile, OutputTable, OutputWriter
from statecore.snapshot.output_rows import checkpoint_commits

SCHEMA = pa.schema([("key", pa.string()), ("amount", pa.int64())])
APP = "statecore:shop/main"
CHECKPOINTS = (1, 2, 3, 4)


def expected(checkpoint_id: int) -> Counter[tuple[str, int]]:
    """Checkpoint ``checkpoint_id``'s rows: two subtasks, three keys each."""
    return Counter(
        (f"k{subtask}{n}", checkpoint_id * 100 + subtask * 10 + n)
        for subtask in (0, 1)
        for n in range(3)
    )


def write(uri: str, checkpoint_id: int, staging: str | None = None) -> list[OutputFile]:
    files = []
    for subtask in (0, 1):
        writer = OutputWriter(
            uri, SCHEMA, checkpoint_id=checkpoint_id, subtask=subtask, staging=staging
        )
        rows = [r for r in expected(checkpoint_id) if r[0].startswith(f"k{subtask}")]
        writer.write(pa.RecordBatch.from_pylist([{"key": k, "amount": a} for k, a in rows], SCHEMA))
        written = writer.close()
        assert written is not None
        files.append(written)
    return files


def commit(uri: str, checkpoint_id: int, staging: str | None = None) -> bool:
    return OutputTable(uri, SCHEMA, app_id=APP).commit(
        write(uri, checkpoint_id, staging), checkpoint_id=checkpoint_id
    )


def replay(uri: str, checkpoint_id: int) -> Counter[tuple[str, int]]:
    """What a replay of ``checkpoint_id`` reads back: its rows alone."""
    found: Counter[tuple[str, int]] = Counter()
    for file in OutputTable(uri, SCHEMA, app_id=APP).checkpoint_files(checkpoint_id):
        fs, path = table_filesystem(file)
        table = pq.read_table(path, filesystem=fs)
        found.update(zip(table.column("key").to_pylist(), table.column("amount").to_pylist()))
    return found


def duckdb_rows(uri: str) -> Counter[tuple[str, int]]:
    query = "SELECT key, amount FROM delta_scan(?)"
    table = connect().execute(query, [uri]).to_arrow_table()
    return Counter(zip(table.column("key").to_pylist(), table.column("amount").to_pylist()))


def every(checkpoints: tuple[int, ...]) -> Counter[tuple[str, int]]:
    total: Counter[tuple[str, int]] = Counter()
    for i in checkpoints:
        total.update(expected(i))
    return total


def versions(uri: str) -> dict[int, int]:
    """The version of each checkpoint's commit."""
    return {c.checkpoint_id: c.version for c in checkpoint_commits(uri)}


def vacuum_all(uri: str) -> None:
    DeltaTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)


@pytest.fixture
def output(tmp_path: Path) -> str:
    uri = str(tmp_path / "out")
    for i in CHECKPOINTS:
        assert commit(uri, i)
    return uri


def _no_checkpoint_names(uri: str) -> bool:
    return not any("part-cp" in name for name in DeltaTable(uri).file_uris())


def test_other_tool_optimize_compact_keeps_each_checkpoint_readable_alone(output: str) -> None:
    DeltaTable(output).optimize.compact()
    assert _no_checkpoint_names(output)  # a name lookup would find nothing
    for i in CHECKPOINTS:
        assert replay(output, i) == expected(i)
    assert duckdb_rows(output) == every(CHECKPOINTS)


def test_other_tool_z_order_keeps_each_checkpoint_readable_alone(output: str) -> None:
    DeltaTable(output).optimize.z_order(["key"])
    assert _no_checkpoint_names(output)
    for i in CHECKPOINTS:
        assert replay(output, i) == expected(i)
    assert duckdb_rows(output) == every(CHECKPOINTS)


def test_other_tool_optimize_then_vacuum_at_retention_0_fails_the_replay_naming_optimize(
    output: str,
) -> None:
    DeltaTable(output).optimize.compact()
    optimized = DeltaTable(output).version()
    vacuum_all(output)
    with pytest.raises(OutputRowsUnavailableError) as raised:
        replay(output, 2)
    message = str(raised.value)
    assert "checkpoint 2" in message and f"OPTIMIZE at version {optimized}" in message
    assert "VACUUM" in message and output in message
    assert duckdb_rows(output) == every(CHECKPOINTS)  # the table itself lost nothing


def test_other_tool_restore_to_before_a_checkpoint_fails_its_replay_naming_restore(
    output: str,
) -> None:
    DeltaTable(output).restore(versions(output)[2])
    assert duckdb_rows(output) == every((1, 2))
    assert replay(output, 2) == expected(2)
    restored = DeltaTable(output).version()
    with pytest.raises(
        OutputRowsUnavailableError, match=rf"checkpoint 3: .*RESTORE at version {restored}"
    ):
        replay(output, 3)


def test_other_tool_restore_is_not_undone_by_later_checkpoints_or_replays(output: str) -> None:
    DeltaTable(output).restore(versions(output)[2])
    assert not commit(output, 4)  # a replay of a checkpoint restored away adds nothing back
    assert commit(output, 5)
    assert duckdb_rows(output) == every((1, 2, 5))
    assert replay(output, 5) == expected(5)
    assert [c.checkpoint_id for c in checkpoint_commits(output)] == [1, 2, 3, 4, 5]


def test_other_tool_restore_undoing_an_optimize_keeps_each_checkpoint_readable(
    output: str,
) -> None:
    before = versions(output)[4]
    DeltaTable(output).optimize.compact()
    DeltaTable(output).restore(before)  # before the OPTIMIZE: the original files are back
    vacuum_all(output)  # deletes the merged files, which no version needs any more
    for i in CHECKPOINTS:
        assert replay(output, i) == expected(i)
    assert duckdb_rows(output) == every(CHECKPOINTS)


def test_other_tool_delete_of_rows_fails_the_replay_naming_delete(output: str) -> None:
    DeltaTable(output).delete("key = 'k01'")
    deleted = DeltaTable(output).version()
    with pytest.raises(
        OutputRowsUnavailableError, match=rf"checkpoint 1: .*DELETE at version {deleted}"
    ):
        replay(output, 1)


def test_other_tool_optimize_and_vacuum_beside_a_pending_commit_lose_nothing(
    output: str, tmp_path: Path
) -> None:
    """Checkpoint 5 completed, its output staged, the driver killed before the output commit;
    another tool then OPTIMIZEs and VACUUMs (retention 0): the roll-forward commits it once and
    its rows read back alone; so do the rows of a later checkpoint after a second OPTIMIZE."""
    staging = str(tmp_path / "_pending_outputs" / "shop" / "5" / "output")
    pending = write(output, 5, staging)
    DeltaTable(output).optimize.compact()
    vacuum_all(output)
    table = OutputTable(output, SCHEMA, app_id=APP)
    assert table.commit(pending, checkpoint_id=5)  # the roll-forward
    assert not table.commit(pending, checkpoint_id=5)  # a second one commits nothing
    assert replay(output, 5) == expected(5)
    assert commit(output, 6)
    DeltaTable(output).optimize.z_order(["amount"])
    assert replay(output, 6) == expected(6)
    assert duckdb_rows(output) == every((*CHECKPOINTS, 5, 6))


def test_other_tool_compaction_of_an_empty_checkpoint_gives_an_empty_answer(output: str) -> None:
    """A checkpoint with no output made no commit: its answer is empty, not an error."""
    DeltaTable(output).optimize.compact()
    assert replay(output, 7) == Counter()


def test_other_tool_commits_are_not_listed_as_checkpoint_commits(output: str) -> None:
    """The dataflow hands on each checkpoint commit once, from a version on; another tool's
    OPTIMIZE or RESTORE is none."""
    at = versions(output)
    DeltaTable(output).optimize.compact()
    assert commit(output, 5)
    five = DeltaTable(output).version()
    listed = [(c.version, c.checkpoint_id) for c in checkpoint_commits(output, since=at[3])]
    assert listed == [(at[3], 3), (at[4], 4), (five, 5)] and five == at[4] + 2
    assert [len(c.paths) for c in checkpoint_commits(output, since=five)] == [2]
