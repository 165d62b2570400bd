"""The Spark runtime and the operations: restore from a savepoint (empty catalog, replayed runs),
job runs refused while a maintenance operation holds the job, expired checkpoints replay, TTL
cleanup of state the runtime wrote (and the job going on from it)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobs import clickstream
from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus
from statecore.checkpoint.points import checkpoint_point
from statecore.cli.demo import generate_clickstream
from statecore.config import StatecoreConfig
from statecore.errors import MaintenanceLockedError, RestoreWouldDiscardError
from statecore.ops.retention import apply_retention
from statecore.ops.savepoint import pin_savepoint, take_savepoint
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.query import run_sql
from statecore.query.diff import checksums
from statecore.ttl import ManualTimeProvider
from tests.ops.statebuilder import catalog_snapshot
from tests.spark import ttl_job

pytestmark = pytest.mark.spark


def run_day(
    spark: Any, config: StatecoreConfig, day: Path, checkpoint_id: int, **options: Any
) -> Any:
    result = clickstream.run(
        spark,
        spark.read.parquet(str(day)),
        checkpoint_id=checkpoint_id,
        config=config,
        parallelism=2,
        **options,
    )
    result.unpersist()
    return result


def state(config: StatecoreConfig) -> list[tuple[str, int, str]]:
    with Catalog.connect(config.catalog_url) as catalog:
        return [
            (c.state, c.rows, c.checksum)
            for c in checksums(checkpoint_point(catalog, "clickstream"))
        ]


@pytest.fixture(scope="module")
def days(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return generate_clickstream(
        tmp_path_factory.mktemp("clicks"), days=2, users=25, events_per_day=100
    )


def test_restore_from_a_savepoint_with_an_empty_catalog(
    spark: Any, days: list[Path], tmp_path: Path
) -> None:
    first = StatecoreConfig.resolve(home=str(tmp_path / "first"), env={})
    run_day(spark, first, days[0], 1)
    with Catalog.connect(first.catalog_url) as catalog:
        saved = take_savepoint(first, catalog, "clickstream", name="day1")
    run_day(spark, first, days[1], 2)

    fresh = StatecoreConfig.resolve(home=str(tmp_path / "fresh"), env={})
    result = run_day(spark, fresh, days[1], 2, restore_from=saved.savepoint)
    assert not result.replayed and state(fresh) == state(first)
    again = run_day(spark, fresh, days[1], 2, restore_from=saved.savepoint)
    assert again.replayed  # an Airflow retry: neither restored again nor processed twice
    with Catalog.connect(fresh.catalog_url) as catalog:
        assert [
            (c.checkpoint_id < 10**18, c.kind) for c in catalog.list_checkpoints("clickstream")
        ] == [(True, CheckpointKind.CHECKPOINT), (False, CheckpointKind.MAINTENANCE)]


def test_restore_from_an_older_savepoint_concurrently_is_refused_unless_forced(
    spark: Any, days: list[Path], tmp_path: Path
) -> None:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    run_day(spark, config, days[0], 1)
    with Catalog.connect(config.catalog_url) as catalog:
        saved = take_savepoint(config, catalog, "clickstream", name="day1")
    run_day(spark, config, days[1], 2)
    before = catalog_snapshot(config)
    with pytest.raises(RestoreWouldDiscardError, match=r"would discard checkpoint\(s\) 2,"):
        run_day(spark, config, days[1], 3, restore_from=saved.savepoint)
    after = catalog_snapshot(config)
    assert after == before  # neither restored nor begun
    result = run_day(spark, config, days[1], 3, restore_from=saved.savepoint, force_restore=True)
    assert not result.replayed and result.checkpoint.restored_from >= 10**18


def test_a_run_restores_from_a_pinned_savepoint_by_name_at_another_parallelism(
    spark: Any, days: list[Path], tmp_path: Path
) -> None:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    run_day(spark, config, days[0], 1)
    with Catalog.connect(config.catalog_url) as catalog:
        pin_savepoint(config, catalog, "clickstream", name="day1")
    run_day(spark, config, days[1], 2)
    day2 = keyed_state(config)
    # day 2 again, from the pin of day 1, at parallelism 3: the same keyed state and timers as
    # the first time (operator state holds an element per instance: it depends on parallelism)
    result = clickstream.run(
        spark,
        spark.read.parquet(str(days[1])),
        checkpoint_id=3,
        config=config,
        parallelism=3,
        restore_from="day1",
        force_restore=True,
    )
    result.unpersist()
    assert not result.replayed and result.checkpoint.restored_from >= 10**18
    assert result.checkpoint.parallelism == 3 and keyed_state(config) == day2


def keyed_state(config: StatecoreConfig) -> list[tuple[str, int, str]]:
    with Catalog.connect(config.catalog_url) as catalog:
        point = checkpoint_point(catalog, "clickstream")
    return [(c.state, c.rows, c.checksum) for c in checksums(point) if c.table_kind != "operator"]


def test_a_run_waits_for_maintenance_and_expired_days_replay(
    spark: Any, days: list[Path], tmp_path: Path
) -> None:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    run_day(spark, config, days[0], 1)
    with Catalog.connect(config.catalog_url) as catalog:
        catalog.acquire_maintenance_lock("clickstream", operation="rescale", owner="host:7")
    before = catalog_snapshot(config)
    with pytest.raises(MaintenanceLockedError, match="'rescale' \\(host:7\\)"):
        run_day(spark, config, days[1], 2)
    assert catalog_snapshot(config) == before
    with Catalog.connect(config.catalog_url) as catalog:
        catalog.release_maintenance_lock("clickstream")
    run_day(spark, config, days[1], 2)
    with Catalog.connect(config.catalog_url) as catalog:
        apply_retention(config, catalog, "clickstream", retain=1, vacuum_after=timedelta(0))
        assert catalog.get_checkpoint("clickstream", 1).status is CheckpointStatus.EXPIRED
    latest = state(config)
    assert run_day(spark, config, days[0], 1).replayed  # day 1 again: not counted twice
    assert state(config) == latest


def test_ttl_cleanup_of_state_written_by_the_runtime(spark: Any, tmp_path: Path) -> None:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    hour = 3_600_000
    t0 = 1_800_000_000_000
    early, late = [f"u{i}" for i in range(10)], [f"u{i}" for i in range(5, 15)]
    ttl_job.run(
        spark,
        ttl_job.visits(spark, early, "home"),
        checkpoint_id=1,
        config=config,
        clock=ManualTimeProvider(t0),
    )
    ttl_job.run(
        spark,
        ttl_job.visits(spark, late, "cart"),
        checkpoint_id=2,
        config=config,
        clock=ManualTimeProvider(t0 + 3 * hour),
    )
    with Catalog.connect(config.catalog_url) as catalog:
        report = ttl_cleanup(
            config,
            catalog,
            "sessions",
            time_provider=ManualTimeProvider(t0 + 3 * hour + 1),
            vacuum_after=None,
        )
        rows = {
            t.state: run_sql(
                catalog, f"SELECT * FROM sessions.{t.state} ORDER BY key", job="sessions"
            ).to_pylist()
            for t in checkpoint_point(catalog, "sessions").tables
        }
    expired_only = [u for u in early if u not in late]  # last written 3 hours ago
    assert report.checkpoint_id is not None
    assert {k.state for k in report.key_groups} == {"last_page", "pages"}
    assert report.rows_reclaimed == 2 * len(expired_only)
    assert report.expired == len(expired_only) + len(early)  # the "home" pages expired
    assert [r["key"] for r in rows["last_page"]] == sorted(late)
    assert {r["key"]: r["value"] for r in rows["pages"]} == {u: ["cart"] for u in late}
    assert len(rows["visits"]) == 15  # no TTL: untouched
    # the job goes on from the cleaned state
    result = ttl_job.run(
        spark,
        ttl_job.visits(spark, ["u0", "u7"], "pay"),
        checkpoint_id=3,
        config=config,
        clock=ManualTimeProvider(t0 + 4 * hour),
    )
    with Catalog.connect(config.catalog_url) as catalog:
        assert result.checkpoint.restored_from == report.checkpoint_id
        pages = run_sql(
            catalog,
            "SELECT key, value FROM sessions.pages WHERE key IN ('u0', 'u7') ORDER BY key",
            job="sessions",
        ).to_pylist()
    assert pages == [{"key": "u0", "value": ["pay"]}, {"key": "u7", "value": ["cart", "pay"]}]
