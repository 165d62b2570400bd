"""delta-spark's OPTIMIZE ... ZORDER BY and VACUUM ... RETAIN 0 HOURS on the output table, across
a kill between a checkpoint's completion and its output commit, with a Delta ``readStream``
reading the table throughout.

The fault job's driver is SIGKILLed at ``output:commit:before`` of checkpoint 2. A downstream
``readStream`` (trigger ``availableNow``, its own checkpoint location) has read checkpoint 1.
delta-spark then Z-orders the output table and VACUUMs it at retention 0. The replay of
checkpoint 2 commits its pending output once and its ``output`` is exactly its rows; checkpoint 3
runs; a second Z-order rewrites checkpoint 3's files: its replay still reads exactly its rows
(through the log: no file bears its name any more); after a VACUUM, its replay's ``output`` fails
naming the OPTIMIZE instead of coming back empty. DuckDB, Spark SQL and the ``readStream`` read
every completed checkpoint's rows exactly once.

delta-spark's ``RESTORE TABLE ... TO VERSION AS OF`` between runs takes a checkpoint's commit
back out of the output table: later checkpoints commit once each, the replay of the checkpoint
restored away fails naming the RESTORE (its rows are not in the table to read), and DuckDB and
Spark SQL read every remaining row once."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.config import StatecoreConfig
from statecore.errors import OutputRowsUnavailableError
from statecore.snapshot.commits import head_version
from statecore.snapshot.output_rows import checkpoint_commits

from .harness import RECOVERY_RETRY_SECONDS, Case, start_case
from .scenario import JOB, differences, expected_outcome, output_table, read_outcome, run_checkpoint
from .test_pending_output_other_tool import _retention_check_off, _spark_rows

pytestmark = pytest.mark.spark

COLUMNS = ["user", "seq", "amount", "running"]


def _rows(frame: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in frame.select(*COLUMNS).collect())


def _read_stream(spark: Any, uri: str, location: Path, sink: str) -> None:
    """Run the downstream ``readStream`` until it caught up, appending to the table ``sink``."""
    query = (
        spark.readStream.format("delta")
        .load(uri)
        .writeStream.format("delta")
        .option("checkpointLocation", str(location))
        .trigger(availableNow=True)
        .start(sink)
    )
    query.awaitTermination()
    assert query.exception() is None


def _optimize(spark: Any, uri: str) -> None:
    spark.sql(f"OPTIMIZE delta.`{uri}` ZORDER BY (user)").collect()


def _vacuum(spark: Any, uri: str) -> None:
    with _retention_check_off(spark):
        spark.sql(f"VACUUM delta.`{uri}` RETAIN 0 HOURS").collect()


def test_other_tool_z_order_and_vacuum_across_a_kill_keep_every_row_once_and_replays_exact(
    spark: Any, fault_home: Callable[[str], StatecoreConfig], tmp_path: Path
) -> None:
    config = fault_home("sqlite")
    case = Case("output:commit:before")
    killed = start_case(spark, config, case, tmp_path / "fired").finish()
    assert killed.fired and killed.returncode == -signal.SIGKILL, killed.log[-3000:]
    uri = output_table(config)
    stream, sink = tmp_path / "downstream-checkpoint", str(tmp_path / "downstream")
    _read_stream(spark, uri, stream, sink)
    assert _rows(spark.read.format("delta").load(sink)) == expected_outcome((1,)).output

    _optimize(spark, uri)
    _vacuum(spark, uri)
    replayed = run_checkpoint(
        spark,
        config,
        api=case.api,
        backend=case.backend,
        checkpoint_id=2,
        retry_for=RECOVERY_RETRY_SECONDS,
    )
    assert replayed.replayed
    only_two = sorted(set(expected_outcome((1, 2)).output) - set(expected_outcome((1,)).output))
    assert _rows(replayed.output) == only_two
    run_checkpoint(spark, config, api=case.api, backend=case.backend, checkpoint_id=3)
    _read_stream(spark, uri, stream, sink)

    _optimize(spark, uri)
    files = spark.read.format("delta").load(uri).inputFiles()
    assert all("part-cp" not in f for f in files)  # a name lookup would find nothing
    replay = run_checkpoint(spark, config, api=case.api, backend=case.backend, checkpoint_id=3)
    only_three = sorted(
        set(expected_outcome((1, 2, 3)).output) - set(expected_outcome((1, 2)).output)
    )
    assert replay.replayed and _rows(replay.output) == only_three
    _vacuum(spark, uri)
    replay = run_checkpoint(spark, config, api=case.api, backend=case.backend, checkpoint_id=3)
    with pytest.raises(OutputRowsUnavailableError, match=r"checkpoint 3: .*OPTIMIZE at version"):
        replay.output  # noqa: B018

    _read_stream(spark, uri, stream, sink)  # the OPTIMIZEs change no data: nothing read again
    expected = expected_outcome((1, 2, 3))
    assert differences(read_outcome(config), expected) == []  # DuckDB: each row once
    assert _spark_rows(spark, uri) == expected.output  # Spark SQL: each row once
    assert _rows(spark.read.format("delta").load(sink)) == expected.output  # readStream
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.pending_outputs(JOB) == []
        assert catalog.get_checkpoint(JOB, 3).status is CheckpointStatus.COMPLETED


def test_other_tool_spark_restore_between_runs_later_checkpoints_commit_once_replay_names_it(
    spark: Any, fault_home: Callable[[str], StatecoreConfig]
) -> None:
    config = fault_home("sqlite")
    for checkpoint_id in (1, 2, 3):
        run_checkpoint(spark, config, api="record", backend="heap", checkpoint_id=checkpoint_id)
    uri = output_table(config)
    at = {c.checkpoint_id: c.version for c in checkpoint_commits(uri)}
    spark.sql(f"RESTORE TABLE delta.`{uri}` TO VERSION AS OF {at[2]}").collect()
    restored = head_version(uri)
    assert restored == at[3] + 1

    four = run_checkpoint(spark, config, api="record", backend="heap", checkpoint_id=4)
    assert not four.replayed
    replay = run_checkpoint(spark, config, api="record", backend="heap", checkpoint_id=4)
    only_four = sorted(
        set(expected_outcome((1, 2, 3, 4)).output) - set(expected_outcome((1, 2, 3)).output)
    )
    assert replay.replayed and _rows(replay.output) == only_four
    replay = run_checkpoint(spark, config, api="record", backend="heap", checkpoint_id=3)
    assert replay.replayed
    with pytest.raises(
        OutputRowsUnavailableError, match=rf"checkpoint 3: .*RESTORE at version {restored}"
    ):
        replay.output  # noqa: B018
    # each checkpoint committed once; the replays and the RESTORE added no checkpoint commit
    commits = [c.checkpoint_id for c in checkpoint_commits(uri)]
    assert commits == [1, 2, 3, 4] and head_version(uri) == restored + 1

    only_three = set(expected_outcome((1, 2, 3)).output) - set(expected_outcome((1, 2)).output)
    remaining = sorted(set(expected_outcome((1, 2, 3, 4)).output) - only_three)
    outcome = read_outcome(config)
    assert outcome.output == remaining  # DuckDB: each remaining row once
    assert _spark_rows(spark, uri) == remaining  # Spark SQL: each remaining row once
    expected = expected_outcome((1, 2, 3, 4))  # the job's state is not restored: it saw 3
    assert (outcome.total, outcome.seqs) == (expected.total, expected.seqs)
    with Catalog.connect(config.catalog_url) as catalog:
        assert catalog.pending_outputs(JOB) == []
        assert catalog.get_checkpoint(JOB, 4).status is CheckpointStatus.COMPLETED
