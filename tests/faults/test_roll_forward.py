"""A driver SIGKILLed after its checkpoint completed, before the output commit: the checkpoint
stays complete, its output pending (no reader sees it yet), and the job's next run, a replay of
the checkpoint, or ``statecore catalog recover`` commits it, once (read back with DuckDB)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.cli import main
from statecore.config import StatecoreConfig

from .harness import RECOVERY_RETRY_SECONDS, Case, start_case
from .scenario import JOB, differences, expected_outcome, read_outcome, run_checkpoint

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("by", ["next run", "replay", "catalog recover"])
def test_roll_forward_a_kill_after_the_completion_before_the_output_commit(
    spark: Any,
    fault_home: Callable[[str], StatecoreConfig],
    tmp_path: Path,
    by: str,
) -> None:
    config = fault_home("sqlite")
    case = Case("output:commit:before")
    killed = start_case(spark, config, case, tmp_path / "fired").finish()
    assert killed.fired and killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.COMPLETED
        assert [p.checkpoint_id for p, _ in catalog.pending_outputs(JOB)] == [2]
    assert read_outcome(config).output == expected_outcome((1,)).output  # not visible yet
    if by == "catalog recover":
        assert main(["--home", config.home, "catalog", "recover", JOB]) == 0
        done: tuple[int, ...] = (1, 2)
    else:
        done = (1, 2, 3) if by == "next run" else (1, 2)
        run_checkpoint(
            spark,
            config,
            api=case.api,
            backend=case.backend,
            checkpoint_id=done[-1],
            retry_for=RECOVERY_RETRY_SECONDS,
        )
    assert differences(read_outcome(config), expected_outcome(done)) == []
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.pending_outputs(JOB) == []
