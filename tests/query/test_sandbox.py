"""``statecore sql``, ``diff`` and ``state apply`` run in DuckDB's sandbox: they read the state
tables of their views and nothing else, and write no file; DuckDB itself refuses the rest."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, StateRepairError
from statecore.ops.repair import apply_sql
from statecore.query import open_views, run_sql
from statecore.query.diff import checksums
from tests.ops.conftest import JOB, job, latest  # noqa: F401 (the fixture)
from tests.ops.statebuilder import catalog_snapshot, files_under


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the warehouse with a CSV, a text and a Parquet file in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.csv").write_text("password\nhunter2\n")
    duckdb.sql(f"COPY (SELECT 'hunter2' AS password) TO '{folder}/secret.parquet'")
    return folder


READS = [
    "SELECT * FROM read_csv('{outside}/secret.csv')",
    "SELECT * FROM read_text('{outside}/secret.csv')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM glob('{outside}/*')",
    "SELECT * FROM read_parquet('{outside}/secret.parquet')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM '{outside}/secret.csv'",
    "SELECT * FROM read_text('{warehouse}/../catalog.db')",
]


@pytest.mark.parametrize("query", READS)
def test_sandbox_refuses_reading_outside_the_state_tables(
    job: StatecoreConfig,  # noqa: F811
    outside: Path,
    query: str,
) -> None:
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(ConfigError, match="reads only the state tables"):
            run_sql(catalog, query.format(outside=outside, warehouse=job.warehouse))


WRITES = [
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{target}'",
    "COPY (SELECT 1) TO '{target}'",
    "EXPORT DATABASE '{folder}'",
    "ATTACH '{target}' AS x",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET allowed_directories = ['/']",
    "RESET lock_configuration",
]


@pytest.mark.parametrize(
    "statement, where",
    [(w, "outside") for w in WRITES] + [(w, "inside a state table") for w in WRITES[:4]],
)
def test_sandbox_refuses_writes_and_settings(
    job: StatecoreConfig,  # noqa: F811
    outside: Path,
    statement: str,
    where: str,
) -> None:
    folder = str(outside) if where == "outside" else latest(job).tables[0].path
    sql = statement.format(target=f"{folder}/x.json", folder=f"{folder}/export")
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(ConfigError, match="read-only"):
            run_sql(catalog, sql)
        # The statement check is a friendly first error; DuckDB itself refuses them outside.
        views = open_views(catalog)
        try:
            if where == "outside":
                with pytest.raises((duckdb.PermissionException, duckdb.InvalidInputException)):
                    views.connection.execute(sql)
        finally:
            views.close()
    assert not Path(folder, "x.json").exists() and not Path(folder, "export").exists()
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_sandbox_keeps_the_views_and_the_catalog_readable(job: StatecoreConfig) -> None:  # noqa: F811
    with Catalog.connect(job.catalog_url) as catalog:
        views = open_views(catalog)
        try:
            con = views.connection
            allowed = con.execute("SELECT current_setting('allowed_directories')").fetchone()
            assert allowed is not None
            spill = f"{views.temp_directory}/"
            assert sorted(allowed[0]) == sorted(
                [spill, *(f"{t.path}/" for t in latest(job).tables)]
            )
            assert con.execute("SELECT current_setting('enable_external_access')").fetchone() == (
                False,
            )
            with pytest.raises(duckdb.InvalidInputException, match="locked"):
                con.execute("SET threads = 1")
        finally:
            views.close()
        assert run_sql(catalog, "SELECT count(*) AS n FROM clicks.total").to_pylist() == [{"n": 41}]
        assert run_sql(catalog, "EXPLAIN SELECT * FROM clicks.plain", job=JOB).num_rows >= 1
        assert run_sql(
            catalog, "SELECT max(checkpoint_id) AS c FROM statecore.checkpoints"
        ).to_pylist() == [{"c": 2}]
    assert len(checksums(latest(job))) == 5


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE clicks.total SET value = (SELECT length(content) FROM read_text('/etc/passwd'))",
        "DELETE FROM clicks.total WHERE key IN (SELECT * FROM read_csv('{outside}/secret.csv'))",
    ],
)
def test_sandbox_state_apply_reads_only_the_state(
    job: StatecoreConfig,  # noqa: F811
    outside: Path,
    sql: str,
) -> None:
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(StateRepairError, match="outside the state tables"):
            apply_sql(job, catalog, JOB, sql.format(outside=outside))
    assert catalog_snapshot(job) == before and files_under(job.warehouse) == files


def test_sandbox_state_apply_reads_targets_with_duckdbs_parser(job: StatecoreConfig) -> None:  # noqa: F811
    """A comment between UPDATE and the table defeated the old regex (a needless refusal), and a
    comment naming a view let a statement write the hidden copy the changes are measured on."""
    before, files = catalog_snapshot(job), files_under(job.warehouse)
    with Catalog.connect(job.catalog_url) as catalog:
        with pytest.raises(StateRepairError, match="must write one of the views"):
            apply_sql(
                job,
                catalog,
                JOB,
                "DELETE /* the copy */ FROM __statecore.total -- UPDATE clicks.total",
            )
        assert catalog_snapshot(job) == before and files_under(job.warehouse) == files
        result = apply_sql(
            job,
            catalog,
            JOB,
            'UPDATE /* double the first user */ clicks . "total" SET value = value * 2 '
            "WHERE key = 'user-1'",
        )
        assert result.savepoint is not None
        assert [(c.state, c.rows_before, c.rows_after) for c in result.changes] == [
            ("total", 41, 41)
        ]
        query = "SELECT value FROM clicks.total WHERE key = 'user-1'"
        assert run_sql(catalog, query, savepoint=result.savepoint).to_pylist() == [{"value": 2.0}]
