"""A task's output file gathers Spark's 10,000-row batches into large row groups: the same rows
in the same order, the same Delta statistics, and bad input still fails as the batch comes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statecore.snapshot import output
from statecore.snapshot.output import OutputWriter

SCHEMA = pa.schema([("key", pa.string()), ("value", pa.int64()), ("new_sum", pa.int64())])


def batches(count: int, rows: int) -> list[pa.RecordBatch]:
    """``count`` batches of ``rows`` rows; some values null, keys repeating across batches."""
    out = []
    for b in range(count):
        seq = range(b * rows, (b + 1) * rows)
        out.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.array([f"user-{i % 37}" for i in seq]),
                    pa.array([None if i % 11 == 0 else i % 100 for i in seq], pa.int64()),
                    pa.array(list(seq), pa.int64()),
                ],
                schema=SCHEMA,
            )
        )
    return out


def written(tmp_path: Path, parts: list[pa.RecordBatch]) -> tuple[output.OutputFile, Path]:
    writer = OutputWriter(str(tmp_path / "table"), SCHEMA, checkpoint_id=3, subtask=1)
    for batch in parts:
        writer.write(batch)
    file = writer.close()
    assert file is not None
    return file, tmp_path / "table" / file.path


def test_per_record_output_batches_gathered_into_one_row_group(tmp_path: Path) -> None:
    parts = [*batches(30, 1_000), pa.RecordBatch.from_pylist([], SCHEMA)]
    file, path = written(tmp_path, parts)
    metadata = pq.read_metadata(path)
    assert metadata.num_row_groups == 1
    assert pq.read_table(path).equals(pa.Table.from_batches(parts))
    assert file.rows == 30_000 and file.size == path.stat().st_size
    stats = json.loads(file.stats)
    assert stats["numRecords"] == 30_000
    assert stats["minValues"]["new_sum"] == 0 and stats["maxValues"]["new_sum"] == 29_999
    assert stats["nullCount"]["value"] == sum(1 for i in range(30_000) if i % 11 == 0)


def test_per_record_output_row_groups_bounded_rows_kept_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = batches(10, 500)
    monkeypatch.setattr(output, "ROW_GROUP_BYTES", parts[0].nbytes * 3)
    file, path = written(tmp_path, parts)
    metadata = pq.read_metadata(path)
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [
        1_500,
        1_500,
        1_500,
        500,
    ]
    assert pq.read_table(path).equals(pa.Table.from_batches(parts))
    assert file.rows == 5_000


def test_per_record_output_bad_schema_fails_when_written(tmp_path: Path) -> None:
    writer = OutputWriter(str(tmp_path / "table"), SCHEMA, checkpoint_id=1, subtask=0)
    writer.write(batches(1, 10)[0])
    bad = pa.RecordBatch.from_pylist([{"key": "a", "value": 1}])
    with pytest.raises(ValueError, match="schema does not match"):
        writer.write(bad)
    writer.abort()  # what a failed task does: nothing of the attempt stays
    assert not any(p.is_file() for p in (tmp_path / "table").rglob("*"))


def test_per_record_output_abort_after_a_row_group_deletes_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = batches(4, 100)
    monkeypatch.setattr(output, "ROW_GROUP_BYTES", 1)  # every batch a row group
    writer = OutputWriter(str(tmp_path / "table"), SCHEMA, checkpoint_id=1, subtask=0)
    for batch in parts:
        writer.write(batch)
    assert any(p.is_file() for p in (tmp_path / "table").rglob("*"))
    writer.abort()
    assert not any(p.is_file() for p in (tmp_path / "table").rglob("*"))


def test_per_record_output_without_rows_writes_no_file(tmp_path: Path) -> None:
    writer = OutputWriter(str(tmp_path / "table"), SCHEMA, checkpoint_id=1, subtask=0)
    writer.write(pa.RecordBatch.from_pylist([], SCHEMA))
    assert writer.close() is None
    assert not (tmp_path / "table").exists()
