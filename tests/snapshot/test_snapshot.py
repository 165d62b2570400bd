"""Delta snapshot tables: incremental per key group, rolled back on failure, read by DuckDB too;
files written from threads with their footer statistics (a failed write completes no
checkpoint), read in one request each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from duckdb_extensions import import_extension

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import CorruptSnapshotError, SnapshotWriteError
from statecore.keygroups import assign_to_key_group
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.snapshot import (
    SnapshotTable,
    state_table_uri,
    write_key_group_file,
    write_key_group_files,
)
from tests.inprocess import run_checkpoint

ROWS = pa.schema(
    [("key", pa.string()), ("namespace", pa.string()), ("value", pa.list_(pa.int64()))]
)


def rows(*items: tuple[str, list[int]]) -> pa.Table:
    return pa.table(
        {
            "key": [k for k, _ in items],
            "namespace": [""] * len(items),
            "value": [v for _, v in items],
        },
        schema=ROWS,
    )


def duck(uri: str, version: int) -> list[tuple[object, ...]]:
    con = duckdb.connect()
    import_extension("delta", con=con)
    return sorted(
        con.sql(
            f"SELECT key_group, key, namespace, value FROM "
            f"delta_scan('{uri}', version => {version})"
        ).fetchall()
    )


def via_deltalake(table: SnapshotTable, version: int) -> list[tuple[object, ...]]:
    out = []
    for kg, t in table.read_files(table.files(version)):
        out += [(kg, r["key"], r["namespace"], r["value"]) for r in t.to_pylist()]
    return sorted(out)


def test_incremental_commits_rollback_and_two_readers(tmp_path: Path) -> None:
    uri = str(tmp_path / "job" / "main" / "keyed" / "last")
    table = SnapshotTable(uri, ROWS, label="job/main/last")

    def commit(files: dict[int, pa.Table], changed: set[int], base: int | None, cp: int) -> int:
        written = [
            write_key_group_file(uri, kg, t, checkpoint_id=cp, subtask=0) for kg, t in files.items()
        ]
        return table.commit(
            written,
            changed_key_groups=changed,
            base_version=base,
            app_id="job/main/last",
            checkpoint_id=cp,
        )

    v1 = commit({1: rows(("a", [1]), ("b", [2, 3])), 2: rows(("c", []))}, {1, 2}, None, 1)
    v2 = commit({1: rows(("a", [1, 4]))}, {1, 3}, v1, 2)
    assert table.key_group_sizes(v2)[2] == table.key_group_sizes(v1)[2]  # kg 2 untouched
    expected = [(1, "a", "", [1, 4]), (2, "c", "", [])]
    assert via_deltalake(table, v2) == duck(uri, v2) == expected
    assert duck(uri, v1) == [(1, "a", "", [1]), (1, "b", "", [2, 3]), (2, "c", "", [])]

    # A checkpoint that committed here, then failed elsewhere, is rolled back by the next one.
    failed = commit({2: rows(("z", [9]))}, {2}, v2, 3)
    assert (2, "z", "", [9]) in duck(uri, failed)
    v4 = commit({}, set(), v2, 3)
    assert duck(uri, v4) == expected


def test_missing_file_is_a_corrupt_snapshot(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = SnapshotTable(uri, ROWS, label="job/main/last")
    f = write_key_group_file(uri, 5, rows(("a", [1])), checkpoint_id=1, subtask=0)
    v = table.commit([f], changed_key_groups={5}, base_version=None, app_id="x", checkpoint_id=1)
    (Path(uri) / f.path).unlink()
    with pytest.raises(CorruptSnapshotError, match="key group 5"):
        list(table.read_files(table.files(v)))
    with pytest.raises(CorruptSnapshotError, match="version 99"):
        table.files(99)


def _rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("/proc/self/io has no rchar")


def test_unreadable_file_is_a_corrupt_snapshot(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = SnapshotTable(uri, ROWS, label="job/main/last")
    f = write_key_group_file(uri, 5, rows(("a", [1])), checkpoint_id=1, subtask=0)
    v = table.commit([f], changed_key_groups={5}, base_version=None, app_id="x", checkpoint_id=1)
    path = Path(uri) / f.path
    path.write_bytes(path.read_bytes()[: f.size // 2])
    with pytest.raises(CorruptSnapshotError, match="key group 5: file .* unreadable"):
        list(table.read_files(table.files(v)))


def test_a_file_is_read_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = SnapshotTable(uri, ROWS, label="job/main/last")
    many = rows(*((f"key-{i}", list(range(i % 7))) for i in range(5_000)))
    f = write_key_group_file(uri, 5, many, checkpoint_id=1, subtask=0)
    files = table.files(
        table.commit([f], changed_key_groups={5}, base_version=None, app_id="x", checkpoint_id=1)
    )
    before = _rchar()
    [(_, read)] = list(table.read_files(files))
    assert read.equals(many.sort_by("key"))  # written sorted by key (a point lookup's row groups)
    assert f.size <= _rchar() - before < 1.2 * f.size  # not the footer, then the columns


def test_statistics_come_from_the_written_footer(tmp_path: Path) -> None:
    written = pa.table(
        {
            "key": ["b", "a", "c"],
            "count": pa.array([3, None, -1], pa.int64()),
            "ratio": [0.5, 2.0, None],
            "flag": [True, False, True],
            "none": pa.array([None, None, None], pa.int32()),
            "value": [[1], [], None],
        }
    )
    f = write_key_group_file(str(tmp_path / "t"), 2, written, checkpoint_id=1, subtask=0)
    assert json.loads(f.stats) == {
        "numRecords": 3,
        "minValues": {"key": "a", "count": -1, "ratio": 0.5, "flag": False},
        "maxValues": {"key": "c", "count": 3, "ratio": 2.0, "flag": True},
        "nullCount": {"key": 0, "count": 1, "ratio": 1, "flag": 0, "none": 3},
    }
    assert f.size == (tmp_path / "t" / f.path).stat().st_size
    assert pq.read_table(tmp_path / "t" / f.path).equals(written.sort_by("key"))  # key order


def test_a_file_that_cannot_be_written_names_its_key_group(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    uri.mkdir()
    (uri / "key_group=7").write_text("a file where the partition folder goes")
    with pytest.raises(
        SnapshotWriteError,
        match=f"checkpoint 3: key_group 7 of snapshot table {uri} cannot be written",
    ):
        write_key_group_file(str(uri), 7, rows(("a", [1])), checkpoint_id=3, subtask=0)


def test_a_failed_write_among_threads_stops_the_others(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    uri.mkdir()
    (uri / "key_group=7").write_text("a file where the partition folder goes")
    consumed = []

    def parts() -> Iterator[tuple[int, pa.Table]]:
        for kg in range(100):
            consumed.append(kg)
            yield kg, rows((f"k{kg}", [kg]))

    with pytest.raises(SnapshotWriteError, match="checkpoint 3: key_group 7 of snapshot table "):
        write_key_group_files(str(uri), parts(), checkpoint_id=3, subtask=0, threads=2)
    assert len(consumed) <= 7 + 2 * 2 + 1  # no further key group once 7 failed
    assert all(len(list((uri / f"key_group={kg}").iterdir())) == 1 for kg in range(7))


def test_files_written_from_threads_keep_the_order_of_their_key_groups(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    parts = [(kg, rows(*((f"k{kg}-{i}", [i]) for i in range(kg * 50)))) for kg in range(1, 30)]
    written = write_key_group_files(uri, iter(parts), checkpoint_id=1, subtask=0, threads=3)
    assert [(f.key_group, f.rows) for f in written] == [(kg, t.num_rows) for kg, t in parts]
    table = SnapshotTable(uri, ROWS, label="job/main/last")
    v = table.commit(
        written, changed_key_groups=set(), base_version=None, app_id="x", checkpoint_id=1
    )
    assert dict(table.read_files(table.files(v))) == {kg: t.sort_by("key") for kg, t in parts}


class Count(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> None:
        self.count.update(self.count.value() + 1)


def test_a_failed_snapshot_write_completes_no_checkpoint(
    statecore_home: StatecoreConfig,
) -> None:
    records = [(f"u{i}", i) for i in range(40)]
    key_group = assign_to_key_group("u7", 128)
    table = Path(state_table_uri(statecore_home.warehouse, "w", "main", "keyed", "count"))
    table.mkdir(parents=True)
    (table / f"key_group={key_group}").write_text("a file where the partition folder goes")
    with pytest.raises(
        SnapshotWriteError, match=f"checkpoint 1: key_group {key_group} of snapshot table "
    ):
        run_checkpoint(statecore_home, Count(), records, job="w", checkpoint_id=1, parallelism=1)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.latest_checkpoint("w") is None
    (table / f"key_group={key_group}").unlink()
    _, record = run_checkpoint(
        statecore_home, Count(), records, job="w", checkpoint_id=1, parallelism=1
    )  # the retry of the same checkpoint completes it
    [count] = [t for t in record.tables if t.state == "count"]
    assert count.rows == 40 and key_group in count.key_groups
