"""Another Delta tool VACUUMs the output table while a completed checkpoint's output is pending.

The fault job's driver is SIGKILLed at ``output:commit:before`` of checkpoint 2 (it completed,
its output files were copied into the table for the commit, which never happened). Then the
output table is VACUUMed by another tool with retention 0 and its check off: deltalake's
``DeltaTable.vacuum`` or delta-spark's ``VACUUM ... RETAIN 0 HOURS``. Both delete the copy in the
table (untracked), neither sees the staged copy (outside the table). The next run, or ``statecore
catalog recover``, copies it again and commits it: every completed checkpoint's rows read back
exactly once by DuckDB and by delta-spark, and the table stays readable. Before, the files were
in the table's folder only: the roll-forward committed ``add`` actions for deleted files,
checkpoint 2's rows were lost and every reader of the table failed."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from statecore.catalog import Catalog, CheckpointStatus
from statecore.cli import main
from statecore.cli.output import NOT_ATTEMPTED
from statecore.config import StatecoreConfig

from .harness import RECOVERY_RETRY_SECONDS, Case, start_case
from .scenario import JOB, differences, expected_outcome, output_table, read_outcome, run_checkpoint

pytestmark = pytest.mark.spark

RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"


@contextmanager
def _retention_check_off(spark: Any) -> Iterator[None]:
    before = spark.conf.get(RETENTION_CHECK, None)
    spark.conf.set(RETENTION_CHECK, "false")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(RETENTION_CHECK)
        else:
            spark.conf.set(RETENTION_CHECK, before)


def _vacuum(spark: Any, tool: str, uri: str) -> None:
    if tool == "deltalake":
        table = DeltaTable(uri)
        table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
        return
    with _retention_check_off(spark):
        spark.sql(f"VACUUM delta.`{uri}` RETAIN 0 HOURS").collect()


def _spark_rows(spark: Any, uri: str) -> list[tuple[Any, ...]]:
    """The output table as delta-spark reads it."""
    frame = spark.read.format("delta").load(uri).select("user", "seq", "amount", "running")
    return sorted(tuple(r) for r in frame.collect())


@pytest.mark.parametrize(
    ("tool", "by"),
    [("deltalake", "next run"), ("delta-spark", "catalog recover")],
)
def test_other_tool_vacuum_of_the_output_table_after_a_kill_loses_no_pending_output(
    spark: Any,
    fault_home: Callable[[str], StatecoreConfig],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tool: str,
    by: str,
) -> None:
    config = fault_home("sqlite")
    case = Case("output:commit:before")
    killed = start_case(spark, config, case, tmp_path / "fired").finish()
    assert killed.fired and killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.get_checkpoint(JOB, 2).status is CheckpointStatus.COMPLETED
        assert [p.checkpoint_id for p, _ in catalog.pending_outputs(JOB)] == [2]
    uri = output_table(config)
    placed = sorted(Path(uri).glob("part-cp000000000002-*.parquet"))
    assert placed, "the kill comes after the copy into the table"
    capsys.readouterr()
    assert main(["--home", config.home, "checkpoints", "list"]) == 0
    listing = capsys.readouterr().out.split("Pending output")
    assert len(listing) == 2 and uri in listing[1] and NOT_ATTEMPTED in listing[1]

    _vacuum(spark, tool, uri)
    assert not any(p.exists() for p in placed)  # the tool deleted the untracked copies
    assert read_outcome(config).output == expected_outcome((1,)).output  # still readable

    if by == "catalog recover":
        assert main(["--home", config.home, "catalog", "recover", JOB]) == 0
        done: tuple[int, ...] = (1, 2)
    else:
        done = (1, 2, 3)
        run_checkpoint(
            spark,
            config,
            api=case.api,
            backend=case.backend,
            checkpoint_id=3,
            retry_for=RECOVERY_RETRY_SECONDS,
        )
    expected = expected_outcome(done)
    assert differences(read_outcome(config), expected) == []  # DuckDB: each row once
    assert _spark_rows(spark, uri) == expected.output  # delta-spark: each row once
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.pending_outputs(JOB) == []
    staging = Path(config.warehouse, "_pending_outputs", JOB)
    assert list(staging.rglob("*.parquet")) == [] and list(staging.glob("*.json")) == []
    _vacuum(spark, tool, uri)  # committed files are the table's: VACUUM keeps them
    assert _spark_rows(spark, uri) == expected.output
