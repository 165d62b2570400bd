"""A lost, empty or old catalog over an existing warehouse: runs are refused, nothing is
overwritten, and ``statecore catalog recover`` rebuilds the catalog from the Delta logs alone;
the job then goes on exactly as a job that never lost its catalog (SQLite and Postgres)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from statecore.catalog import Catalog, CheckpointKind, CheckpointStatus, PendingOutput
from statecore.checkpoint.output_records import (
    delete_pending_records,
    pending_records,
    write_pending_record,
)
from statecore.checkpoint.points import checkpoint_point
from statecore.cli import main
from statecore.config import StatecoreConfig
from statecore.descriptors import ListStateDescriptor, ValueStateDescriptor
from statecore.errors import CatalogBehindWarehouseError
from statecore.ops.savepoint import take_savepoint
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.query.diff import checksums
from statecore.runtime import (
    CheckpointedFunction,
    Context,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    RuntimeContext,
)
from tests.catalog.conftest import POSTGRES_SCHEMA, catalog_url  # noqa: F401
from tests.inprocess import run_checkpoint
from tests.ops.statebuilder import files_under
from tests.postgres import POSTGRES_ENV, run_admin

JOB = "tally"
FAR = 10**15  # a processing-time timer that never fires: the timers table is written


class Tally(KeyedProcessFunction, CheckpointedFunction):
    """Running totals (value state), the last values (list state), a timer per key, and the
    records each subtask saw (operator state)."""

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.batches = context.operator_state_store.get_list_state(
            ListStateDescriptor("batches", int)
        )
        self.seen = 0

    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", float))
        self.values = ctx.get_list_state(ListStateDescriptor("values", float))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[Any, ...]]:
        total = (self.total.value() or 0.0) + value
        self.total.update(total)
        self.values.add(value)
        ctx.timer_service.register_processing_time_timer(FAR)
        self.seen += 1
        yield ctx.current_key, total

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        self.batches.add(self.seen)


def records(checkpoint_id: int) -> list[tuple[str, float]]:
    return [(f"user-{(i * checkpoint_id) % 30}", float(i + checkpoint_id)) for i in range(90)]


def run(config: StatecoreConfig, checkpoint_id: int) -> list[Any]:
    out, _ = run_checkpoint(
        config, Tally(), records(checkpoint_id), job=JOB, checkpoint_id=checkpoint_id
    )
    return sorted(out)


def state(config: StatecoreConfig) -> list[Any]:
    with Catalog.connect(config.catalog_url) as catalog:
        return [(c.state, c.rows, c.checksum) for c in checksums(checkpoint_point(catalog, JOB))]


def lose_catalog(url: str) -> None:
    """The catalog is gone: the SQLite file deleted, the Postgres schema dropped."""
    if url.startswith("sqlite"):
        Path(sa.make_url(url).database or "").unlink()
    else:
        run_admin(
            sa.make_url(os.environ[POSTGRES_ENV]),
            f"DROP SCHEMA IF EXISTS {POSTGRES_SCHEMA} CASCADE",
            f"CREATE SCHEMA {POSTGRES_SCHEMA}",
        )


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[tuple[StatecoreConfig, list[Any]]]:
    """A job that never lost its catalog: checkpoints 1 to 4; the outputs of 4."""
    config = StatecoreConfig.resolve(home=str(tmp_path / "reference"), env={})
    for checkpoint_id in (1, 2, 3):
        run(config, checkpoint_id)
    yield config, run(config, 4)


def test_a_lost_catalog_is_refused_then_recovered_from_the_delta_logs_after_a_crash(
    catalog_url: str,  # noqa: F811
    tmp_path: Path,
    reference: tuple[StatecoreConfig, list[Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), catalog_url=catalog_url, env={})
    for checkpoint_id in (1, 2, 3):
        run(config, checkpoint_id)
    with Catalog.connect(config.catalog_url) as catalog:
        before_states = catalog.list_states(JOB)
    before = state(config)
    lose_catalog(catalog_url)

    files = files_under(config.warehouse)
    with pytest.raises(CatalogBehindWarehouseError, match=r"catalog recover tally") as refused:
        run(config, 4)
    assert "has no completed checkpoint" in str(refused.value)
    assert f"{config.warehouse}/{JOB}/main/keyed/total" in str(refused.value)
    assert files_under(config.warehouse) == files  # nothing overwritten
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.list_jobs() == []  # nor registered

    home = ["--home", config.home, "--catalog-url", catalog_url]
    assert main([*home, "catalog", "recover", JOB, "--dry-run", "--format", "json"]) == 0
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.list_jobs() == []
    assert main([*home, "catalog", "recover", JOB]) == 0, capsys.readouterr().err
    assert "checkpoint_id" in capsys.readouterr().out

    with Catalog.connect(config.catalog_url) as catalog:
        job = catalog.get_job(JOB)
        assert (job.parallelism, job.max_parallelism) == (2, 128)
        listed = catalog.list_checkpoints(JOB)
        assert [(c.checkpoint_id, c.status, c.kind) for c in listed] == [
            (i, CheckpointStatus.COMPLETED, CheckpointKind.CHECKPOINT) for i in (1, 2, 3)
        ]
        assert catalog.list_states(JOB) == [s for s in before_states] or _same_states(
            catalog.list_states(JOB), before_states
        )
    assert state(config) == before
    # the job goes on from checkpoint 3 exactly as the one that never lost its catalog
    reference_config, reference_out = reference
    assert run(config, 4) == reference_out
    assert state(config) == state(reference_config)


def _same_states(a: list[Any], b: list[Any]) -> bool:
    strip = lambda s: (s.operator, s.name, s.kind, s.descriptor, s.schema, s.ttl)  # noqa: E731
    return [strip(s) for s in a] == [strip(s) for s in b]


def test_fault_an_old_catalog_backup_is_refused_and_recovered_with_maintenance_checkpoints(
    tmp_path: Path, reference: tuple[StatecoreConfig, list[Any]]
) -> None:
    """A catalog restored from a backup taken after checkpoint 1: it knows 1, the tables hold
    2, a savepoint restore (a MAINTENANCE checkpoint) and 3; all are recovered."""
    config = StatecoreConfig.resolve(home=str(tmp_path / "home"), env={})
    run(config, 1)
    database = Path(sa.make_url(config.catalog_url).database or "")
    shutil.copy(database, tmp_path / "backup.db")
    run(config, 2)
    with Catalog.connect(config.catalog_url) as catalog:
        saved = take_savepoint(config, catalog, JOB, name="two")
    assert main(["--home", config.home, "savepoints", "restore", str(saved.savepoint)]) == 0
    run(config, 3)
    before = state(config)
    shutil.copy(tmp_path / "backup.db", database)

    with Catalog.connect(config.catalog_url) as catalog:
        with pytest.raises(CatalogBehindWarehouseError, match="knows checkpoints up to"):
            run(config, 4)
        with pytest.raises(CatalogBehindWarehouseError):
            ttl_cleanup(config, catalog, JOB)  # its VACUUM would trust the old catalog
        assert [c.checkpoint_id for c in catalog.list_checkpoints(JOB)] == [1]  # 4 never began
    assert main(["--home", config.home, "catalog", "recover", JOB]) == 0
    with Catalog.connect(config.catalog_url) as catalog:
        listed = [(c.checkpoint_id, c.kind) for c in catalog.list_checkpoints(JOB)]
    assert listed == [
        (1, CheckpointKind.CHECKPOINT),
        (2, CheckpointKind.CHECKPOINT),
        (3, CheckpointKind.CHECKPOINT),
        (10**18 + 1, CheckpointKind.MAINTENANCE),
    ]
    assert state(config) == before
    assert run(config, 4) == reference[1]


def test_bad_input_recover_of_a_job_without_tables_changes_nothing(
    statecore_home: StatecoreConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    run(statecore_home, 1)
    assert main(["--home", statecore_home.home, "catalog", "recover", "nope"]) == 2
    assert "job 'nope': no table below" in capsys.readouterr().err
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert [j.name for j in catalog.list_jobs()] == [JOB]


def _pending(checkpoint_id: int, uri: str) -> PendingOutput:
    return PendingOutput(
        job=JOB,
        checkpoint_id=checkpoint_id,
        uri=uri,
        kind="output",
        app_id=f"statecore:{JOB}",
        table_schema="{}",
        files=({"path": f"part-{checkpoint_id}.parquet"},),
    )


def test_pending_output_records_keep_the_latest_attempt(
    statecore_home: StatecoreConfig,
) -> None:
    """Records of one checkpoint by writers of epochs 3 and 1 (one taken over, writing late):
    the record read back is epoch 3's; deleting the checkpoint's records deletes both."""
    warehouse = statecore_home.warehouse
    write_pending_record(warehouse, JOB, 7, [_pending(7, "/new")], epoch=3)
    write_pending_record(warehouse, JOB, 7, [_pending(7, "/old")], epoch=1)
    write_pending_record(warehouse, JOB, 8, [_pending(8, "/eight")], epoch=3)
    records = pending_records(warehouse, JOB)
    assert {i: [(o.uri, o.epoch) for o in r] for i, r in records.items()} == {
        7: [("/new", 3)],
        8: [("/eight", 3)],
    }
    delete_pending_records(warehouse, JOB, 7)
    assert list(pending_records(warehouse, JOB)) == [8]


def test_recover_warns_of_a_recorded_output_no_table_shows_and_commits_nothing(
    statecore_home: StatecoreConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded pending output of checkpoint 5, which no state table shows (it changed no
    state, or failed before its state commits): after a lost catalog, recover cannot tell
    whether it completed; it says so and commits nothing."""
    config = statecore_home
    run(config, 1)
    output = str(tmp_path / "output")
    write_pending_record(config.warehouse, JOB, 5, [_pending(5, output)], epoch=2)
    Path(sa.make_url(config.catalog_url).database or "").unlink()
    assert main(["--home", config.home, "catalog", "recover", JOB]) == 0
    err = capsys.readouterr().err
    assert f"WARNING: catalog recover {JOB}: checkpoint 5 recorded output files for {output}" in err
    assert list(pending_records(config.warehouse, JOB)) == [5]  # left as it is
    assert not Path(output).exists()  # nothing committed
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.pending_outputs(JOB) == []
        assert [c.checkpoint_id for c in catalog.list_checkpoints(JOB)] == [1]
