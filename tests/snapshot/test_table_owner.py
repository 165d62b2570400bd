"""One owner per output table, whatever the spelling: locations canonical (symlinks, S3
schemes, trailing slashes) for the catalog's binding, the owner written into the table and
checked before each commit (nothing written on refusal), and application ids that carry the
home, so two homes with one job name never skip each other's checkpoints. Real Delta tables
(deltalake, read back by DuckDB) and a real catalog; no Spark."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from duckdb_extensions import import_extension

from statecore.catalog import Catalog
from statecore.checkpoint.outputs import OutputSink
from statecore.errors import OutputOwnedError, TableOwnedError
from statecore.snapshot.locations import (
    OWNER_PROPERTY,
    OWNER_WAREHOUSE_PROPERTY,
    canonical_location,
    output_app_id,
)
from statecore.snapshot.output import OutputTable, OutputWriter, output_table_key

SCHEMA = pa.schema([("value", pa.int64())])


def _table(uri: str, warehouse: str, job: str, operator: str = "main") -> OutputTable:
    return OutputTable(
        canonical_location(uri),
        SCHEMA,
        app_id=output_app_id(warehouse, job, operator),
        warehouse=canonical_location(warehouse),
    )


def _write(table: OutputTable, staging: Path, checkpoint_id: int, value: int) -> bool:
    writer = OutputWriter(
        table.uri, SCHEMA, checkpoint_id=checkpoint_id, subtask=0, staging=str(staging)
    )
    writer.write(pa.record_batch({"value": [value]}, schema=SCHEMA))
    written = writer.close()
    assert written is not None
    return table.commit([written], checkpoint_id=checkpoint_id)


def _duck(uri: str) -> list[int]:
    con = duckdb.connect()
    import_extension("delta", con=con)
    return sorted(v for (v,) in con.sql(f"SELECT value FROM delta_scan('{uri}')").fetchall())


def _parquet_files(uri: str) -> set[str]:
    return {p.name for p in Path(uri).rglob("*.parquet")}


def test_table_owner_symlinked_folder_is_one_table(tmp_path: Path) -> None:
    real = tmp_path / "lake"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    assert canonical_location(str(link / "out")) == str(real / "out")
    assert output_table_key(f"file://{link}/out/") == output_table_key(str(real / "out"))
    warehouse = str(tmp_path / "warehouse")
    assert _write(_table(str(real / "out"), warehouse, "a"), tmp_path / "stage", 1, 1)
    other = _table(f"{link}/out/", warehouse, "b")  # job b, through the symlink
    with pytest.raises(TableOwnedError, match="job|owned by statecore:"):
        _write(other, tmp_path / "stage", 1, 2)
    assert _duck(str(real / "out")) == [1]
    with Catalog.connect(f"sqlite:///{tmp_path / 'catalog.db'}") as catalog:
        catalog.bind_outputs(
            [(output_table_key(str(real / "out")), "output")], job="a", operator="m"
        )
        with pytest.raises(OutputOwnedError, match="cannot write it too"):
            catalog.bind_outputs(
                [(output_table_key(f"{link}/out"), "output")], job="b", operator="m"
            )


def test_table_owner_s3_spellings_are_one_location(tmp_path: Path) -> None:
    spellings = ["s3://b/t", "s3a://b/t/", "s3n://b/t", "S3A://b/t//"]
    assert {canonical_location(s) for s in spellings} == {"s3://b/t"}
    assert output_table_key("s3a://b/t") == "s3://b/t"
    assert output_app_id("s3a://b/wh/", "j", "m") == output_app_id("s3://b/wh", "j", "m")
    with Catalog.connect(f"sqlite:///{tmp_path / 'catalog.db'}") as catalog:
        catalog.bind_outputs([(output_table_key("s3://b/t"), "output")], job="a", operator="m")
        with pytest.raises(OutputOwnedError, match="s3://b/t is written by"):
            catalog.bind_outputs(
                [(output_table_key("s3a://b/t/"), "output")], job="b", operator="m"
            )


def test_table_owner_two_homes_with_one_job_name_never_skip_each_others_checkpoints(
    tmp_path: Path,
) -> None:
    out = str(tmp_path / "out")
    home_a, home_b = str(tmp_path / "a" / "warehouse"), str(tmp_path / "b" / "warehouse")
    assert output_app_id(home_a, "orders", "main") != output_app_id(home_b, "orders", "main")
    first = _table(out, home_a, "orders")
    for cp in (1, 2, 3):
        assert _write(first, tmp_path / "stage", cp, cp)
    second = _table(out, home_b, "orders")  # the same job name in another home
    with pytest.raises(TableOwnedError, match=f"whose warehouse is {home_a}"):
        _write(second, tmp_path / "stage", 1, 100)
    # handed over as the error says: home b's checkpoint 1 is committed, not skipped as done
    DeltaTable(out).alter.set_table_properties(
        {OWNER_PROPERTY: second.app_id}, raise_if_not_exists=False
    )
    assert _write(second, tmp_path / "stage", 1, 100)
    assert _duck(out) == [1, 2, 3, 100]


def test_table_owner_another_jobs_table_refuses_and_writes_nothing(tmp_path: Path) -> None:
    out, warehouse = str(tmp_path / "out"), str(tmp_path / "warehouse")
    _write(_table(out, warehouse, "a"), tmp_path / "stage", 1, 1)
    version, files = DeltaTable(out).version(), _parquet_files(out)
    intruder = _table(out, warehouse, "b")
    with pytest.raises(TableOwnedError):
        OutputSink(intruder, kind="output").check()  # before the run processes anything
    with pytest.raises(TableOwnedError):
        _write(intruder, tmp_path / "stage", 7, 7)
    assert DeltaTable(out).version() == version
    assert _parquet_files(out) == files  # no file put into the table's folder
    assert _duck(out) == [1]


def test_table_owner_error_names_both_owners_and_what_to_do(tmp_path: Path) -> None:
    out, warehouse = str(tmp_path / "out"), str(tmp_path / "warehouse")
    owner = _table(out, warehouse, "a", "enrich")
    _write(owner, tmp_path / "stage", 1, 1)
    assert DeltaTable(out).metadata().configuration[OWNER_WAREHOUSE_PROPERTY] == warehouse
    asking = _table(out, str(tmp_path / "other"), "b", "score")
    with pytest.raises(TableOwnedError) as raised:
        _write(asking, tmp_path / "stage", 1, 2)
    message = str(raised.value)
    assert f"is owned by {owner.app_id}, of the home whose warehouse is {warehouse}" in message
    assert f"this writer is {asking.app_id}, of the home whose warehouse is" in message
    assert f"SET TBLPROPERTIES ('{OWNER_PROPERTY}' = '{asking.app_id}')" in message
    assert "nothing was written" in message


def test_table_owner_unowned_table_with_rows_is_refused_until_taken(tmp_path: Path) -> None:
    out, warehouse = str(tmp_path / "out"), str(tmp_path / "warehouse")
    write_deltalake(out, pa.table({"value": [42]}, schema=SCHEMA))  # another tool's table
    table = _table(out, warehouse, "a")
    with pytest.raises(TableOwnedError, match="holds rows that no statecore writer owns"):
        _write(table, tmp_path / "stage", 1, 1)
    assert _duck(out) == [42] and DeltaTable(out).version() == 0
    DeltaTable(out).alter.set_table_properties(
        {OWNER_PROPERTY: table.app_id}, raise_if_not_exists=False
    )
    assert _write(table, tmp_path / "stage", 1, 1)
    assert _duck(out) == [1, 42]


def test_table_owner_empty_table_created_ahead_is_taken(tmp_path: Path) -> None:
    out, warehouse = str(tmp_path / "out"), str(tmp_path / "warehouse")
    DeltaTable.create(out, SCHEMA)  # CREATE TABLE ahead of the job, no rows
    table = _table(out, warehouse, "a")
    assert _write(table, tmp_path / "stage", 1, 1)
    assert DeltaTable(out).metadata().configuration[OWNER_PROPERTY] == table.app_id
    with pytest.raises(TableOwnedError):
        _write(_table(out, warehouse, "b"), tmp_path / "stage", 1, 2)
    assert _duck(out) == [1]


def test_table_owner_recorded_for_a_table_an_older_statecore_wrote(tmp_path: Path) -> None:
    """A table written before owners were recorded (its commits under the app id without a
    home) is taken by the same writer, and an older pending commit still goes in."""
    out, warehouse = str(tmp_path / "out"), str(tmp_path / "warehouse")
    old = OutputTable(out, SCHEMA, app_id="statecore:a/main")
    _write(old, tmp_path / "stage", 1, 1)
    assert OWNER_PROPERTY not in DeltaTable(out).metadata().configuration
    new = _table(out, warehouse, "a")
    assert new.app_id.endswith(":a/main") and new.app_id != old.app_id
    assert _write(new, tmp_path / "stage", 2, 2)
    assert DeltaTable(out).metadata().configuration[OWNER_PROPERTY] == new.app_id
    assert _write(old, tmp_path / "stage", 3, 3)  # a commit an older statecore left pending
    assert _duck(out) == [1, 2, 3]
