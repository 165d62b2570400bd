"""Operations over changelog checkpoints with pending changes: each one sees the same state as
over a run without changelog (savepoints and rescale carry the changes tables; diff reads state
with its changes applied; repair deletes a key from both tables; state apply and TTL cleanup
materialize first, under the job's lease)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecore.catalog import Catalog
from statecore.checkpoint.points import checkpoint_point
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.ops.repair import apply_sql, delete_key
from statecore.ops.rescale import rescale
from statecore.ops.savepoint import restore_savepoint, take_savepoint
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.query import run_sql
from statecore.query.diff import checksums, diff_points
from statecore.snapshot.changelog import ChangelogConfig
from statecore.ttl import ManualTimeProvider
from tests.inprocess import run_checkpoint
from tests.runtime.test_changelog import Mixed, batches

PENDING = ChangelogConfig(materialize_every=100, max_change_ratio=100.0)
QUERY = "SELECT key, namespace, user_key, value FROM j.pages ORDER BY key, user_key"


def _home(tmp_path: Path, name: str, changelog: ChangelogConfig | None) -> StatecoreConfig:
    config = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / name)})
    for i, batch in enumerate(batches(5, 3, 40), start=1):
        run_checkpoint(
            config,
            Mixed(),
            batch,
            job="j",
            checkpoint_id=i,
            changelog=changelog,
            clock=ManualTimeProvider(1_000 * i),
        )
    return config


def _pending(catalog: Catalog) -> int:
    return sum(t.rows for t in checkpoint_point(catalog, "j").tables if t.table_kind == "changes")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> StatecoreConfig:
    return _home(tmp_path_factory.mktemp("plain"), "plain", None)


@pytest.fixture
def logged(tmp_path: Path) -> StatecoreConfig:
    return _home(tmp_path, "logged", PENDING)


def test_changelog_savepoint_restore_and_rescale_over_pending_changes(
    plain: StatecoreConfig, logged: StatecoreConfig, tmp_path: Path
) -> None:
    with Catalog.connect(plain.catalog_url) as a, Catalog.connect(logged.catalog_url) as b:
        expected = run_sql(a, QUERY).to_pylist()
        reference = checkpoint_point(a, "j")
        assert _pending(b) > 0
        assert diff_points(reference, checkpoint_point(b, "j")) == diff_points(reference, reference)
        savepoint = take_savepoint(logged, b, "j", name="before")
        other = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "other")})
        with Catalog.connect(other.catalog_url) as c:
            restore_savepoint(other, c, savepoint.savepoint or "")
            assert run_sql(c, QUERY).to_pylist() == expected
        rescale(logged, b, "j", parallelism=3, max_parallelism=256)
        after = checkpoint_point(b, "j")
        assert after.max_parallelism == 256
        assert run_sql(b, QUERY).to_pylist() == expected
        strip = [(c.table_kind, c.state, c.rows, c.keys, c.checksum) for c in checksums(after)]
        assert strip == [
            (c.table_kind, c.state, c.rows, c.keys, c.checksum) for c in checksums(reference)
        ]


def test_changelog_repair_and_ttl_cleanup_over_pending_changes(
    plain: StatecoreConfig, logged: StatecoreConfig
) -> None:
    with Catalog.connect(plain.catalog_url) as a, Catalog.connect(logged.catalog_url) as b:
        expected = run_sql(a, QUERY).to_pylist()
        victim = expected[0]["key"]
        deleted = delete_key(logged, b, "j", victim, name="erased")
        assert deleted.savepoint is not None
        other = StatecoreConfig.resolve(env={"STATECORE_HOME": logged.home + "-erased"})
        with Catalog.connect(other.catalog_url) as c:
            restore_savepoint(other, c, deleted.savepoint)
            assert run_sql(c, QUERY).to_pylist() == [r for r in expected if r["key"] != victim]
        with pytest.raises(ConfigError, match="pending changelog changes"):
            apply_sql(logged, b, "j", "DELETE FROM j.pages WHERE value > 1", source="2")
        applied = apply_sql(logged, b, "j", "DELETE FROM j.pages WHERE value > 1")
        assert _pending(b) == 0  # state apply materialized the latest checkpoint first
        assert applied.savepoint is not None
        assert run_sql(b, QUERY).to_pylist() == expected
        b.get_job("j")
    logged_again = logged
    with Catalog.connect(logged_again.catalog_url) as b:
        ttl_cleanup(logged_again, b, "j", time_provider=ManualTimeProvider(10**12))
        assert _pending(b) == 0
        assert run_sql(b, "SELECT count(*) AS n FROM j.recent").to_pylist() == [{"n": 0}]
