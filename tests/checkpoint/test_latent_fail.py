"""Latent bug: when marking a checkpoint FAILED fails too, the error that failed the checkpoint
was lost (the catalog's error replaced it). The original must propagate, the catalog's error
attached to it as a note, and the tables rolled back all the same."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.coordinator import CheckpointCoordinator
from statecore.checkpoint.lock import hold_lease
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.errors import CheckpointCommitError
from statecore.runtime.task import StateSnapshotResult
from statecore.snapshot import write_key_group_file
from statecore.types import schema_to_text

JOB = "orders"
ROWS = pa.schema(
    [("key", pa.string(), False), ("namespace", pa.string(), False), ("value", pa.int64())]
)


class Injected(Exception):
    """The failure the test injects."""


@pytest.fixture
def config(tmp_path: Path) -> StatecoreConfig:
    return StatecoreConfig.resolve(env={"STATECORE_HOME": str(tmp_path / "statecore")})


@pytest.fixture
def catalog(config: StatecoreConfig) -> Iterator[Catalog]:
    opened = Catalog.connect(config.catalog_url)
    opened.ensure_job(JOB, parallelism=1, max_parallelism=128)
    yield opened
    opened.close()


def _checkpoint(config: StatecoreConfig, catalog: Catalog, checkpoint_id: int) -> None:
    with hold_lease(catalog, JOB, "run", timeout=timedelta(minutes=1)) as lease:
        coordinator = CheckpointCoordinator(config, catalog, job=JOB, operator="main", lease=lease)
        coordinator.resolve_abandoned()
        planned = coordinator.plan(
            checkpoint_id, parallelism=1, max_parallelism=128, default_parallelism=1
        )
        rows = pa.table({"key": ["k"], "namespace": [""], "value": [checkpoint_id]}, schema=ROWS)
        written = write_key_group_file(
            coordinator.table_uri("total"), 0, rows, checkpoint_id=checkpoint_id, subtask=0
        )
        coordinator.commit(
            planned,
            [
                StateSnapshotResult(
                    state="total",
                    schema=schema_to_text(ROWS),
                    descriptor=ValueStateDescriptor("total", int).describe(),
                    changed_key_groups=(0,),
                    files=(written,),
                )
            ],
        )


def test_latent_a_failing_fail_keeps_the_original_error(
    config: StatecoreConfig, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    _checkpoint(config, catalog, 1)

    def complete_checkpoint(*args: Any, **kwargs: Any) -> Any:
        raise Injected("the completion failed")

    def fail_checkpoint(*args: Any, **kwargs: Any) -> Any:
        raise CheckpointCommitError("the catalog is down")

    monkeypatch.setattr(catalog, "complete_checkpoint", complete_checkpoint)
    monkeypatch.setattr(catalog, "fail_checkpoint", fail_checkpoint)
    with pytest.raises(Injected, match="the completion failed") as raised:
        _checkpoint(config, catalog, 2)
    assert any("the catalog is down" in note for note in raised.value.__notes__)
    monkeypatch.undo()
    uri = f"{config.warehouse}/{JOB}/main/keyed/total"
    assert DeltaTable(uri).to_pyarrow_table().column("value").to_pylist() == [1]  # rolled back
    assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.IN_PROGRESS
    _checkpoint(config, catalog, 2)  # the next run fails the abandoned attempt, then commits
    assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.COMPLETED
    assert DeltaTable(uri).to_pyarrow_table().column("value").to_pylist() == [2]
