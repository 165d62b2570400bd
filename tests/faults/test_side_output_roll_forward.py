"""A side output's table is committed with its checkpoint as the output table is: a driver
SIGKILLed after the checkpoint completed, before the output commits, leaves both pending (no
reader sees either), and the job's next run rolls both forward, once (read back with DuckDB)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig

from .harness import RECOVERY_RETRY_SECONDS, Case, start_case
from .scenario import (
    JOB,
    SIDE_API,
    differences,
    expected_outcome,
    expected_side,
    read_outcome,
    read_side,
    run_checkpoint,
    side_table,
)

pytestmark = pytest.mark.spark


def test_side_output_rolls_forward_after_a_kill_between_completion_and_output_commit(
    spark: Any,
    fault_home: Callable[[str], StatecoreConfig],
    tmp_path: Path,
) -> None:
    config = fault_home("sqlite")
    case = Case("output:commit:before", api=SIDE_API)
    killed = start_case(spark, config, case, tmp_path / "fired").finish()
    assert killed.fired and killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.COMPLETED
        pending = [(p.checkpoint_id, p.kind) for p, _ in catalog.pending_outputs(JOB)]
    assert sorted(pending) == [(2, "output"), (2, "side-output")]
    assert read_side(config) == expected_side((1,))  # checkpoint 2's not visible yet
    run_checkpoint(
        spark,
        config,
        api=SIDE_API,
        backend=case.backend,
        checkpoint_id=3,
        retry_for=RECOVERY_RETRY_SECONDS,
    )
    assert differences(read_outcome(config), expected_outcome((1, 2, 3))) == []
    assert read_side(config) == expected_side((1, 2, 3))  # each big event once
    assert Path(side_table(config), "_delta_log").is_dir()
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.pending_outputs(JOB) == []
