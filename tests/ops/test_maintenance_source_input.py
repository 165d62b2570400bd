"""A maintenance checkpoint (TTL cleanup, materialization, a savepoint restored) processes no
input of its own: it carries over what its base's state reflects, the input identity (a
stream's micro-batch and source offsets) and the watermark. So a savepoint taken right after
one still gives the Kafka offsets a new query continues from
(:func:`~statecore.spark.savepoint_offsets`). The catalog in-process, no Spark, no broker."""

from __future__ import annotations

import json
from pathlib import Path

from statecore.catalog import Catalog, CheckpointKind
from statecore.config import StatecoreConfig
from statecore.ops.materialize import materialize_changes
from statecore.ops.savepoint import restore_savepoint, take_savepoint
from statecore.ops.ttl_cleanup import ttl_cleanup
from statecore.snapshot.changelog import ChangelogConfig
from statecore.spark import savepoint_offsets
from statecore.ttl import ManualTimeProvider
from tests.inprocess import run_checkpoint
from tests.ops.conftest import JOB, USERS, tables
from tests.ops.statebuilder import write_checkpoint
from tests.runtime.test_changelog import Mixed, batches

OFFSETS = {"clicks": {"0": 120, "1": 97}}
WATERMARK = 25_000
PENDING = ChangelogConfig(materialize_every=100, max_change_ratio=100.0)
"""Changelog checkpoints whose changes stay pending until an operation materializes them."""


def micro_batch(batch_id: int, end: int) -> str:
    """The input identity a micro-batch of ``keyed_stream`` over Kafka records."""
    offsets = {
        "start": [{"clicks": {"0": end - 10, "1": 90}}],
        "end": [{"clicks": {"0": end, "1": 97}}],
    }
    return "given:" + json.dumps({"batch_id": batch_id, "offsets": offsets})


def test_ttl_cleanup_checkpoint_keeps_the_micro_batch_offsets_for_a_savepoint(
    statecore_home: StatecoreConfig,
) -> None:
    write_checkpoint(
        statecore_home, JOB, 1, tables(USERS, 10_000), input_identity=micro_batch(0, 110)
    )
    write_checkpoint(
        statecore_home,
        JOB,
        2,
        tables(USERS, 20_000),
        input_identity=micro_batch(1, 120),
        watermark=WATERMARK,
    )
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        report = ttl_cleanup(
            statecore_home,
            catalog,
            JOB,
            time_provider=ManualTimeProvider(21_020),
            vacuum_after=None,
        )
        assert report.checkpoint_id is not None and report.expired > 0
        cleaned = catalog.get_checkpoint(JOB, report.checkpoint_id)
        assert cleaned.kind == CheckpointKind.MAINTENANCE and cleaned.restored_from == 2
        assert cleaned.input_identity == micro_batch(1, 120)
        assert cleaned.watermark == WATERMARK
        saved = take_savepoint(statecore_home, catalog, JOB, name="after-cleanup")
    assert saved.checkpoint_id == report.checkpoint_id and saved.savepoint is not None
    assert json.loads(savepoint_offsets(saved.savepoint)) == OFFSETS
    assert json.loads(savepoint_offsets(saved)) == OFFSETS


def test_restored_savepoint_checkpoint_keeps_the_savepoint_offsets(
    statecore_home: StatecoreConfig,
) -> None:
    """Restoring a savepoint makes it a maintenance checkpoint with the savepoint's input (not
    the input of the checkpoint it replaces); a savepoint of that one keeps it again."""
    write_checkpoint(
        statecore_home, JOB, 1, tables(USERS, 10_000), input_identity=micro_batch(0, 120)
    )
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        first = take_savepoint(statecore_home, catalog, JOB, name="at-120")
        assert first.savepoint is not None
        write_checkpoint(
            statecore_home, JOB, 2, tables(USERS, 20_000), input_identity=micro_batch(1, 150)
        )
        restored = restore_savepoint(statecore_home, catalog, first.savepoint, force=True)
        assert restored.kind == CheckpointKind.MAINTENANCE
        assert restored.input_identity == micro_batch(0, 120)
        again = take_savepoint(statecore_home, catalog, JOB, name="restored")
    assert again.checkpoint_id == restored.checkpoint_id and again.savepoint is not None
    assert json.loads(savepoint_offsets(again.savepoint)) == OFFSETS


def test_materialized_changelog_checkpoint_keeps_the_micro_batch_offsets_and_watermark(
    tmp_path: Path,
) -> None:
    config = StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "logged")})
    for i, batch in enumerate(batches(3, 3, 40), start=1):
        run_checkpoint(
            config,
            Mixed(),
            batch,
            job="j",
            checkpoint_id=i,
            changelog=PENDING,
            clock=ManualTimeProvider(1_000 * i),
            input_identity=micro_batch(i - 1, 100 + 10 * i),
            watermark=WATERMARK + i,
        )
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_checkpoint("j", 3).watermark == WATERMARK + 3
        record = materialize_changes(catalog, "j")
        assert record is not None and record.kind == CheckpointKind.MAINTENANCE
        assert record.input_identity == micro_batch(2, 130)
        assert record.watermark == WATERMARK + 3  # the base's, as the state it holds
        saved = take_savepoint(config, catalog, "j", name="materialized")
    assert json.loads(savepoint_offsets(saved)) == {"clicks": {"0": 130, "1": 97}}
