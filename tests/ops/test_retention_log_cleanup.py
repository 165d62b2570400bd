"""``statecore retention`` (:func:`~statecore.ops.retention.apply_retention`) cuts the Delta logs
too: after VACUUM, every table of the job and its output table keep the log of the retained
checkpoints only (back to a log checkpoint), and the retained checkpoints still read back. A dry
run says what it would delete and deletes nothing. :mod:`tests.object_store` runs the same on S3.
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from statecore.catalog import Catalog
from statecore.checkpoint.points import checkpoint_point
from statecore.config import StatecoreConfig
from statecore.ops.retention import apply_retention
from statecore.query.diff import checksums
from statecore.query.sql import run_sql
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL, log_entries
from statecore.snapshot.output import OutputTable, OutputWriter, output_version_at
from statecore.snapshot.storage import open_table
from tests.ops.conftest import JOB, tables
from tests.ops.statebuilder import write_checkpoint

CHECKPOINTS = 2 * LOG_CHECKPOINT_INTERVAL + 3
RETAIN = 3
OUT = pa.schema([("key", pa.string()), ("n", pa.int64())])


def commits(uri: str) -> int:
    return sum(1 for name in log_entries(uri) if name.endswith(".json"))


def checkpoints_then_bounded_retention(
    config: StatecoreConfig, output: str, *, checkpoints: int = CHECKPOINTS, retain: int = RETAIN
) -> None:
    """``checkpoints`` checkpoints of ``JOB`` (and their output in ``output``), then retention
    of the last ``retain``, a dry run first: the logs are cut, what is retained reads back."""
    users = {f"user-{i}": float(i) for i in range(3)}
    sink = OutputTable(output, OUT, app_id=f"statecore:{JOB}/main")
    for checkpoint_id in range(1, checkpoints + 1):
        values = dict(users, **{"user-0": float(checkpoint_id)})
        write_checkpoint(config, JOB, checkpoint_id, tables(values, 10_000 * checkpoint_id))
        writer = OutputWriter(output, OUT, checkpoint_id=checkpoint_id, subtask=0)
        writer.write(pa.record_batch({"key": ["user-0"], "n": [checkpoint_id]}, schema=OUT))
        written = writer.close()
        assert written is not None
        sink.commit([written], checkpoint_id=checkpoint_id)
    retained = range(checkpoints - retain + 1, checkpoints + 1)
    with Catalog.connect(config.catalog_url) as catalog:
        sums = {i: checksums(checkpoint_point(catalog, JOB, i)) for i in retained}
        uris = [t.path for t in catalog.get_checkpoint(JOB, checkpoints).tables] + [output]
        before = {uri: log_entries(uri) for uri in uris}
        dry = apply_retention(
            config,
            catalog,
            JOB,
            retain=retain,
            log_grace=timedelta(0),
            outputs=[output],
            dry_run=True,
        )
        assert dry.log_files_deleted > 0 and dry.to_dict()["log_files_deleted"] > 0
        assert {uri: log_entries(uri) for uri in uris} == before
        report = apply_retention(
            config,
            catalog,
            JOB,
            retain=retain,
            vacuum_after=timedelta(0),
            log_grace=timedelta(0),
            outputs=[output],
        )
        assert report.retained == tuple(retained)
        assert report.log_files_deleted == dry.log_files_deleted
        assert {c.uri for c in report.logs} == {u.rstrip("/") for u in uris}
        for uri in uris:  # one commit per checkpoint before; a bound after
            assert commits(uri) <= retain + LOG_CHECKPOINT_INTERVAL < checkpoints, uri
        for i in retained:
            assert checksums(checkpoint_point(catalog, JOB, i)) == sums[i]
            rows = run_sql(catalog, f"SELECT count(*) AS n FROM {JOB}.total", checkpoint_id=i)
            assert rows.to_pylist() == [{"n": len(users)}]
            version = output_version_at(output, i)
            assert version is not None
            assert open_table(output, version=version).to_pyarrow_table().num_rows == i
        again = apply_retention(
            config, catalog, JOB, retain=retain, log_grace=timedelta(0), outputs=[output]
        )
        assert again.logs == ()  # idempotent


def test_retention_log_cleanup_bounded_on_a_local_warehouse(
    statecore_home: StatecoreConfig,
) -> None:
    checkpoints_then_bounded_retention(statecore_home, f"{statecore_home.warehouse}/out")
