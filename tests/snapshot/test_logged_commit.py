"""An incremental commit costs what it changes: statecore writes its log entry itself
(:mod:`statecore.snapshot.log_commit`) on the version the driver keeps, and delta-rs (which
replays the table's whole file list at every commit) is called only when another writer
committed since, or for a log checkpoint every ten commits.

Real Parquet files behind the log, read back by delta-rs and DuckDB as written.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from statecore.errors import ConcurrentRunError
from statecore.snapshot import SnapshotFile, SnapshotTable, open_tables
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL
from statecore.snapshot.storage import open_table
from statecore.snapshot.table import CHECKPOINT_METADATA, Fence

ROWS = pa.schema([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.int64())])
KEY_GROUPS = 8


def _file(uri: str, key_group: int, checkpoint_id: int, value: int) -> SnapshotFile:
    """One real Parquet file of ``key_group`` holding one key, in the table's folder."""
    path = f"key_group={key_group}/cp-{checkpoint_id}-{uuid.uuid4().hex[:12]}.parquet"
    (Path(uri) / path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"key": [f"k{key_group}"], "value": [value]}, ROWS), Path(uri) / path)
    return SnapshotFile(
        path=path,
        key_group=key_group,
        rows=1,
        size=(Path(uri) / path).stat().st_size,
        modification_time=time.time_ns() // 1_000_000,
        stats=json.dumps({"numRecords": 1}),
    )


def _commit(
    table: SnapshotTable, key_groups: list[int], base: int | None, checkpoint_id: int, **kw: Any
) -> int:
    return table.commit(
        [_file(table.uri, kg, checkpoint_id, checkpoint_id * 100 + kg) for kg in key_groups],
        changed_key_groups=key_groups,
        base_version=base,
        app_id="logged/main/total",
        checkpoint_id=checkpoint_id,
        **kw,
    )


def _delta_rs_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for name in ("create_write_transaction", "update_incremental"):
        original = getattr(DeltaTable, name)

        def counting(self: DeltaTable, *a: Any, _name: str = name, _f: Any = original, **k: Any):
            calls.append(_name)
            return _f(self, *a, **k)

        monkeypatch.setattr(DeltaTable, name, counting)
    return calls


def _values(uri: str) -> dict[str, int]:
    rows = duckdb.sql(f"SELECT key, value FROM delta_scan('{uri}')").fetchall()
    return dict(rows)


def test_proportional_logged_commit_calls_no_delta_rs_and_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="logged/main/total")
    version = _commit(table, list(range(KEY_GROUPS)), None, 1)
    calls = _delta_rs_calls(monkeypatch)
    expected = {f"k{kg}": 100 + kg for kg in range(KEY_GROUPS)}
    for checkpoint_id in range(2, 2 + LOG_CHECKPOINT_INTERVAL + 2):
        changed = [checkpoint_id % KEY_GROUPS]
        calls.clear()
        version = _commit(table, changed, version, checkpoint_id)
        expected[f"k{changed[0]}"] = checkpoint_id * 100 + changed[0]
        if version % LOG_CHECKPOINT_INTERVAL:
            assert calls == [], f"version {version}: {calls}"
        else:  # the log checkpoint: delta-rs brings the table up to date to write it
            assert calls == ["update_incremental"]
            assert (Path(uri) / f"_delta_log/{version:020d}.checkpoint.parquet").exists()
        # Read back as written: delta-rs (files, history, transactions) and DuckDB (rows).
        fresh = open_table(uri)
        assert fresh.version() == version
        assert len(fresh.file_uris()) == KEY_GROUPS
        info = fresh.history(1)[0]
        assert info[CHECKPOINT_METADATA] == str(checkpoint_id)
        assert fresh.transaction_version("logged/main/total") == checkpoint_id
        assert _values(uri) == expected
        kept = table.files(version)
        assert sorted(f.path for f in kept) == sorted(
            f.path for f in table._files(open_table(uri, version))
        )


def test_proportional_logged_commit_yields_to_another_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer committed the next version since: the log entry is not written over
    it, and the commit goes through delta-rs, which restores the base version first (as for
    any commit on a table that moved)."""
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="logged/main/total")
    version = _commit(table, list(range(KEY_GROUPS)), None, 1)
    version = _commit(table, [1], version, 2)
    entry = open_tables.take(uri)  # the driver's entry, at ``version``
    assert entry is not None and entry.version == version
    _commit(SnapshotTable(uri, ROWS, label="another"), [2], version, 99)  # another process
    open_tables.forget(uri)
    open_tables.keep(uri, entry)  # the driver still holds ``version``, its commit file as seen
    calls = _delta_rs_calls(monkeypatch)
    after = _commit(table, [3], version, 3)
    assert "create_write_transaction" in calls  # delta-rs committed it
    assert after == version + 3  # the other's commit, the RESTORE, this one
    values = _values(uri)
    assert values["k2"] == 102  # the other writer's commit was not on the base version
    assert values["k3"] == 303 and values["k1"] == 201
    assert open_table(uri).transaction_version("logged/main/total") == 3


def test_proportional_logged_commit_fenced_by_a_newer_epoch_in_this_process(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="logged/main/total")
    version = _commit(table, list(range(KEY_GROUPS)), None, 1, fence=Fence("logged", 1))
    version = _commit(table, [1], version, 2, fence=Fence("logged", 2))  # taken over: epoch 2
    assert open_tables.peek(uri) is not None  # the entry the next commit would write on
    with pytest.raises(ConcurrentRunError, match="epoch 2 of a newer writer"):
        _commit(table, [2], version, 3, fence=Fence("logged", 1))
    assert open_table(uri).version() == version  # nothing written
    assert _commit(table, [2], version, 3, fence=Fence("logged", 2)) == version + 1


def test_proportional_logged_commit_read_by_spark(tmp_path: Path, spark: Any) -> None:
    """delta-spark reads statecore's own log entries: the latest version, an older one by
    version, and the history with the checkpoint in its metadata."""
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="logged/main/total")
    first = _commit(table, list(range(KEY_GROUPS)), None, 1)
    version = _commit(table, [1], first, 2)
    version = _commit(table, [2], version, 3)
    assert open_table(uri).history(1)[0]["engineInfo"].startswith("statecore")

    def values(**options: Any) -> dict[str, int]:
        reader = spark.read.format("delta")
        for name, value in options.items():
            reader = reader.option(name, value)
        return {r["key"]: r["value"] for r in reader.load(uri).collect()}

    assert values() == {**{f"k{kg}": 100 + kg for kg in range(KEY_GROUPS)}, "k1": 201, "k2": 302}
    assert values(versionAsOf=version - 1)["k2"] == 102
    history = spark.sql(f"DESCRIBE HISTORY delta.`{uri}`").orderBy("version").collect()
    assert [h["version"] for h in history][-2:] == [version - 1, version]


def test_proportional_logged_commit_of_nothing_writes_no_version(tmp_path: Path) -> None:
    """A checkpoint that changed nothing in a table (a changelog checkpoint's keyed table)
    leaves it at its version, as delta-rs's path does."""
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="logged/main/total")
    version = _commit(table, list(range(KEY_GROUPS)), None, 1)
    version = _commit(table, [1], version, 2, fence=Fence("logged", 2))
    assert _commit(table, [], version, 3) == version
    assert open_table(uri).version() == version
    assert not (Path(uri) / f"_delta_log/{version + 1:020d}.json").exists()
    with pytest.raises(ConcurrentRunError):  # still fenced, as a commit
        _commit(table, [], version, 4, fence=Fence("logged", 1))
