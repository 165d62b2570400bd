"""Another writer's commit on a state table is never undone: a checkpoint that finds one after
its base version fails naming it (version, operation, time, engine), nothing is RESTOREd over
it, and the checkpoint after the user undid the change themselves completes. statecore's own
failed attempts are still restored away. Real Delta tables, another real writer (deltalake's
``write_deltalake``), read back by DuckDB and deltalake; the harness (no Spark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from duckdb_extensions import import_extension

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import ForeignCommitError
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.snapshot import SnapshotTable, state_table_uri, write_key_group_file
from statecore.snapshot.foreign import RESTORE_METADATA
from statecore.snapshot.rewrite import commit_files, table_layout, write_partition_file
from tests.inprocess import run_checkpoint

ROWS = pa.schema([("key", pa.string()), ("namespace", pa.string()), ("value", pa.int64())])
TABLE = ROWS.append(pa.field("key_group", pa.int32(), nullable=False))


def _rows(key: str, value: int) -> pa.Table:
    return pa.table({"key": [key], "namespace": [""], "value": [value]}, schema=ROWS)


def _commit(table: SnapshotTable, cp: int, key_group: int, value: int, base: int | None) -> int:
    written = write_key_group_file(
        table.uri, key_group, _rows(f"k{key_group}", value), checkpoint_id=cp, subtask=0
    )
    return table.commit(
        [written],
        changed_key_groups={key_group},
        base_version=base,
        app_id="job/main/total",
        checkpoint_id=cp,
    )


def _other_tool_appends(uri: str, key: str, value: int, key_group: int) -> int:
    """Another writer (deltalake, not statecore) appends a row; the version it made."""
    row = pa.table(
        {"key": [key], "namespace": [""], "value": [value], "key_group": [key_group]},
        schema=TABLE,
    )
    write_deltalake(uri, row, mode="append", partition_by=["key_group"])
    return DeltaTable(uri).version()


def _duck(uri: str) -> dict[str, int]:
    con = duckdb.connect()
    import_extension("delta", con=con)
    return dict(con.sql(f"SELECT key, value FROM delta_scan('{uri}')").fetchall())


def _operations(uri: str) -> list[str]:
    return [str(c.get("operation")) for c in DeltaTable(uri).history()]


def test_other_tool_commit_fails_the_checkpoint_naming_it_and_survives(tmp_path: Path) -> None:
    uri = str(tmp_path / "job" / "main" / "keyed" / "total")
    table = SnapshotTable(uri, ROWS, label="job/main/total")
    base = _commit(table, 1, 0, 10, None)
    theirs = _other_tool_appends(uri, "fixed", 99, 5)  # between checkpoint 2's read and commit
    with pytest.raises(ForeignCommitError) as raised:
        _commit(table, 2, 1, 20, base)
    message = str(raised.value)
    assert f"version {theirs} (WRITE at " in message and "by delta-rs" in message
    assert f"after version {base}, which this checkpoint builds on" in message
    assert f"TO VERSION AS OF {base}" in message and "checkpoint 2" in message
    assert _duck(uri) == {"k0": 10, "fixed": 99}  # their row is there, checkpoint 2's is not
    assert "RESTORE" not in _operations(uri)
    assert DeltaTable(uri).version() == theirs


def test_other_tool_commit_is_not_rolled_back_by_a_failed_checkpoint(tmp_path: Path) -> None:
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="job/main/total")
    base = _commit(table, 1, 0, 10, None)
    _commit(table, 2, 1, 20, base)  # checkpoint 2 committed here, then failed elsewhere
    theirs = _other_tool_appends(uri, "fixed", 99, 5)
    with pytest.raises(ForeignCommitError, match=f"version {theirs} \\(WRITE"):
        table.roll_back(base)
    assert _duck(uri) == {"k0": 10, "k1": 20, "fixed": 99}
    assert "RESTORE" not in _operations(uri)


def test_other_tool_change_undone_by_the_user_lets_the_next_checkpoint_complete(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="job/main/total")
    base = _commit(table, 1, 0, 10, None)
    _other_tool_appends(uri, "fixed", 99, 5)
    with pytest.raises(ForeignCommitError):
        _commit(table, 2, 1, 20, base)
    DeltaTable(uri).restore(base)  # what the error says to do
    done = _commit(table, 2, 1, 20, base)
    assert _duck(uri) == {"k0": 10, "k1": 20}
    assert DeltaTable(uri).version() == done
    assert _operations(uri).count("RESTORE") == 1  # the user's: statecore restored nothing


def test_other_tool_absent_statecore_still_restores_its_own_failed_attempt(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="job/main/total")
    base = _commit(table, 1, 0, 10, None)
    _commit(table, 2, 2, 77, base)  # an attempt of checkpoint 2 that never completed
    _commit(table, 2, 1, 20, base)  # the retry restores it away first
    assert _duck(uri) == {"k0": 10, "k1": 20}
    [restore] = [c for c in DeltaTable(uri).history() if c.get("operation") == "RESTORE"]
    assert restore[RESTORE_METADATA] == str(base)


class Count(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> None:
        self.count.update(self.count.value() + 1)


def test_other_tool_update_of_a_checkpoint_table_fails_the_next_checkpoint(
    statecore_home: StatecoreConfig,
) -> None:
    """Through the coordinator: the next checkpoint fails naming the commit and is not
    completed; the other writer's row stays; after the user's RESTORE it completes."""
    records = [(f"u{i}", i) for i in range(6)]
    run_checkpoint(statecore_home, Count(), records, job="c", checkpoint_id=1, parallelism=1)
    uri = state_table_uri(statecore_home.warehouse, "c", "main", "keyed", "count")
    base = DeltaTable(uri).version()
    schema = DeltaTable(uri).schema().to_arrow()
    row = {f.name: [None] for f in schema}
    row.update(key=["intruder"], namespace=[""], key_group=[0])
    write_deltalake(uri, pa.table(row, schema=pa.schema(schema)), mode="append")
    theirs = DeltaTable(uri).version()
    with pytest.raises(ForeignCommitError, match=f"version {theirs} \\(WRITE"):
        run_checkpoint(statecore_home, Count(), records, job="c", checkpoint_id=2, parallelism=1)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.get_checkpoint("c", 2).status is CheckpointStatus.FAILED
        assert catalog.latest_checkpoint("c").checkpoint_id == 1  # type: ignore[union-attr]
    keys = DeltaTable(uri).to_pyarrow_table().column("key").to_pylist()
    assert "intruder" in keys
    DeltaTable(uri).restore(base)
    _, record = run_checkpoint(
        statecore_home, Count(), records, job="c", checkpoint_id=2, parallelism=1
    )
    assert record.status is CheckpointStatus.COMPLETED


def test_other_tool_commit_fails_a_maintenance_rewrite_too(tmp_path: Path) -> None:
    """The maintenance operations' commit (TTL cleanup, materialize) keeps the same rule."""
    uri = str(tmp_path / "total")
    table = SnapshotTable(uri, ROWS, label="job/main/total")
    base = _commit(table, 1, 0, 10, None)
    layout = table_layout(uri, base)
    rewritten = write_partition_file(uri, layout, 0, _rows("k0", 11), prefix="ttl")
    theirs = _other_tool_appends(uri, "fixed", 99, 5)
    with pytest.raises(ForeignCommitError, match=f"version {theirs} \\(WRITE"):
        commit_files(
            uri,
            layout,
            [rewritten],
            replaced={0},
            base_version=base,
            app_id="job/main/total",
            checkpoint_id=10**18,
        )
    assert _duck(uri) == {"k0": 10, "fixed": 99}
    # statecore's own failed rewrite attempt is still restored away by its retry
    DeltaTable(uri).restore(base)
    attempt = commit_files(
        uri, layout, [rewritten], replaced={0}, base_version=base + 2, app_id="a", checkpoint_id=7
    )
    retried = write_partition_file(uri, layout, 0, _rows("k0", 12), prefix="ttl")
    commit_files(
        uri, layout, [retried], replaced={0}, base_version=attempt - 1, app_id="a", checkpoint_id=7
    )
    assert _duck(uri) == {"k0": 12}
