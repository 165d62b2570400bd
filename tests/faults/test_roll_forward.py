"""A driver SIGKILLed after its checkpoint completed, before the output commit: the checkpoint
stays complete, its output pending (no reader sees it yet), and the job's next run, a replay of
the checkpoint, or ``statecore catalog recover`` commits it, once (read back with DuckDB)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from statecore.catalog import Catalog, CheckpointStatus
from statecore.checkpoint.output_records import pending_records_folder
from statecore.cli import main
from statecore.config import StatecoreConfig
from tests.postgres import run_admin

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


def test_roll_forward_discards_the_record_of_a_checkpoint_killed_before_its_state_commits(
    spark: Any,
    fault_home: Callable[[str], StatecoreConfig],
    tmp_path: Path,
) -> None:
    """A kill right after the pending output commits were recorded (catalog and warehouse),
    before any state table is committed: no reader sees the checkpoint's output, and the next
    run fails it, deletes its files and its warehouse record, and goes on: nothing pending is
    left for a ``catalog recover`` to find."""
    config = fault_home("sqlite")
    case = Case("catalog:pending")
    killed = start_case(spark, config, case, tmp_path / "fired").finish()
    assert killed.fired and killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    records = Path(pending_records_folder(config.warehouse, JOB))
    assert [p.name.split(".")[0] for p in records.glob("*.json")] == ["2"]
    assert read_outcome(config).output == expected_outcome((1,)).output
    run_checkpoint(
        spark,
        config,
        api=case.api,
        backend=case.backend,
        checkpoint_id=3,
        retry_for=RECOVERY_RETRY_SECONDS,
    )
    assert list(records.glob("*.json")) == []
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.FAILED
        assert catalog.pending_outputs(JOB) == []
    expected = expected_outcome((1, 3))  # checkpoint 2's input is not the job's (it failed)
    expected.statuses[2] = CheckpointStatus.FAILED.name
    assert differences(read_outcome(config), expected) == []


def _lose_catalog(config: StatecoreConfig) -> None:
    """The catalog is gone: the SQLite file deleted, or the Postgres schema dropped (and made
    again, empty)."""
    url = sa.make_url(config.catalog_url)
    if url.get_backend_name() == "sqlite":
        Path(url.database or "").unlink()
        return
    schema = url.query["options"].removeprefix("-csearch_path=")  # type: ignore[union-attr]
    admin = url.set(query={})
    run_admin(admin, f"DROP SCHEMA {schema} CASCADE", f"CREATE SCHEMA {schema}")


@pytest.mark.parametrize("catalog", ["sqlite", "postgres"])
def test_roll_forward_the_pending_output_of_a_lost_catalog_after_catalog_recover(
    spark: Any,
    fault_home: Callable[[str], StatecoreConfig],
    tmp_path: Path,
    catalog: str,
) -> None:
    """Checkpoint 3 completed, its output commit killed, then the catalog lost: `catalog
    recover` rebuilds checkpoint 3 from the state tables and its pending output commit from the
    warehouse's record of it, and commits it once; the next run goes on. Before, the recovered
    catalog had no pending commit: checkpoint 3's rows never reached the output table."""
    config = fault_home(catalog)
    case = Case("output:commit:before", faulted=3)
    killed = start_case(spark, config, case, tmp_path / "fired").finish()
    assert killed.fired and killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    records = Path(pending_records_folder(config.warehouse, JOB))
    assert [p.name.split(".")[0] for p in records.glob("*.json")] == ["3"]
    assert read_outcome(config).output == expected_outcome((1, 2)).output  # not visible yet
    _lose_catalog(config)
    assert main(["--home", config.home, "--catalog-url", config.catalog_url, "catalog",
                 "recover", JOB]) == 0  # fmt: skip
    assert differences(read_outcome(config), expected_outcome((1, 2, 3))) == []
    assert list(records.glob("*.json")) == []  # committed: its record is gone
    with Catalog.connect(config.catalog_url) as recovered:
        assert recovered.pending_outputs(JOB) == []
    run_checkpoint(
        spark,
        config,
        api=case.api,
        backend=case.backend,
        checkpoint_id=4,
        retry_for=RECOVERY_RETRY_SECONDS,
    )
    # DuckDB reads every row of checkpoints 1 to 4 exactly once
    assert differences(read_outcome(config), expected_outcome((1, 2, 3, 4))) == []
