"""What an hourly availableNow increment finds new since the last run that succeeded
(:mod:`statecore.ops.increments`): the files or Kafka offsets it saw, recorded in the query's
checkpoint location once its query succeeded. The DAG runs are in
``tests/airflow/test_streaming.py`` and ``tests/kafka/test_kafka_dag.py``."""

from __future__ import annotations

import os
from pathlib import Path

from statecore.ops.increments import (
    InputRead,
    input_listing,
    new_files,
    new_offsets,
    read_input_read,
    record_input_read,
)


def test_new_files_are_those_not_read_or_changed_since(tmp_path: Path) -> None:
    root = tmp_path / "in"
    (root / "date=2026-01-01").mkdir(parents=True)
    (root / "date=2026-01-01" / "a.parquet").write_bytes(b"a")
    (root / "_spark_metadata").mkdir()
    (root / "_spark_metadata" / "0").write_bytes(b"not data")
    (root / ".a.parquet.crc").write_bytes(b"not data")
    assert input_listing(str(tmp_path / "missing")) == {}
    seen = input_listing(str(root))
    assert list(seen) == [str(root / "date=2026-01-01" / "a.parquet")]
    assert new_files(seen, None, str(root)) == list(seen), "nothing read yet: all new"

    read = InputRead(run_id="streaming_pipeline/r1", source=str(root), files=seen)
    assert new_files(input_listing(str(root)), read, str(root)) == []
    (root / "date=2026-01-02").mkdir()
    (root / "date=2026-01-02" / "b.parquet").write_bytes(b"b")
    assert new_files(input_listing(str(root)), read, str(root)) == [
        str(root / "date=2026-01-02" / "b.parquet")
    ]
    changed = root / "date=2026-01-01" / "a.parquet"
    changed.write_bytes(b"a, longer")
    os.utime(changed, ns=(1, 1))
    assert str(changed) in new_files(input_listing(str(root)), read, str(root))
    assert new_files(seen, read, str(tmp_path / "other")) == list(seen), "another folder"


def test_new_offsets_are_partitions_past_what_was_read() -> None:
    read = InputRead(run_id="streaming_kafka/r1", source="b:9092/clicks", offsets={"0": 5, "1": 3})
    assert new_offsets({"0": 5, "1": 3}, read, "b:9092/clicks") == {}
    assert new_offsets({"0": 6, "1": 3}, read, "b:9092/clicks") == {"0": 6}
    assert new_offsets({"0": 5, "1": 3, "2": 1}, read, "b:9092/clicks") == {"2": 1}
    assert new_offsets({"0": 5, "1": 3, "2": 0}, read, "b:9092/clicks") == {}
    assert new_offsets({"0": 5, "1": 0}, None, "b:9092/clicks") == {"0": 5}, "none read yet"
    assert new_offsets({"0": 5}, read, "b:9092/other") == {"0": 5}, "another topic: all new"


def test_the_record_of_what_was_read_lives_in_the_checkpoint_location(tmp_path: Path) -> None:
    location = str(tmp_path / "streaming" / "job")
    assert read_input_read(location) is None
    read = InputRead(run_id="d/r", source="b:9092/t", offsets={"0": 7})
    record_input_read(location, read)
    assert read_input_read(location) == read
    assert (tmp_path / "streaming" / "job" / "_statecore" / "input_read.json").is_file()
