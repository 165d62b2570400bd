"""SQL over changelog checkpoints: the views merge pending changes; after materialization the
state table alone, read by DuckDB, is the state."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from duckdb_extensions import import_extension

from statecore.catalog import Catalog
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.ops.materialize import materialize_changes
from statecore.query import run_sql
from statecore.query.lookup import lookup
from statecore.snapshot.changelog import ChangelogConfig
from tests.inprocess import run_checkpoint
from tests.runtime.test_changelog import Mixed, batches

QUERIES = {
    "total": "SELECT key, value FROM j.total ORDER BY key",
    "pages": "SELECT key, user_key, value FROM j.pages ORDER BY key, user_key",
}


def _run(config: StatecoreConfig, changelog: ChangelogConfig | None) -> None:
    for i, batch in enumerate(batches(3, 3, 50), start=1):
        run_checkpoint(config, Mixed(), batch, job="j", checkpoint_id=i, changelog=changelog)


def test_changelog_sql_views_merge_pending_changes_then_materialize(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "plain")})
    logged = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "logged")})
    _run(plain, None)
    _run(logged, ChangelogConfig(materialize_every=100, max_change_ratio=100.0))
    with Catalog.connect(plain.catalog_url) as a, Catalog.connect(logged.catalog_url) as b:
        expected = {n: run_sql(a, q).to_pylist() for n, q in QUERIES.items()}
        assert {n: run_sql(b, q).to_pylist() for n, q in QUERIES.items()} == expected
        for row in expected["total"][:5]:  # a point lookup applies its key group's changes
            found = lookup("j", "total", row["key"], config=logged)
            assert (found.found, found.value) == (True, row["value"])
        tables = b.latest_checkpoint("j").tables
        assert {t.state for t in tables if t.table_kind == "changes" and t.rows}
        home = ["--home", logged.home, "--catalog-url", logged.catalog_url]
        assert main([*home, "materialize", "j", "--format", "json"]) == 0
        assert '"states": "pages, recent, total"' in capsys.readouterr().out
        record = b.latest_checkpoint("j")
        by_kind = {(t.table_kind, t.state): t for t in record.tables}
        assert all(t.rows == 0 for (kind, _), t in by_kind.items() if kind == "changes")
        assert {n: run_sql(b, q).to_pylist() for n, q in QUERIES.items()} == expected
        total = by_kind["keyed", "total"]
        con = duckdb.connect()
        import_extension("delta", con=con)
        alone = con.sql(
            f"SELECT key, value FROM delta_scan('{total.path}', version => {total.version}) "
            "ORDER BY key"
        ).fetchall()
        assert [{"key": k, "value": v} for k, v in alone] == expected["total"]
        assert materialize_changes(b, "j") is None  # nothing pending any more
        assert main([*home, "materialize", "j"]) == 0
        assert "no pending changes" in capsys.readouterr().out
