"""Delta log cleanup on S3 (a real S3 API server on loopback): retention cuts the logs of the
job's tables and of its output table in another bucket, and the retained checkpoints read back
(:func:`tests.ops.test_retention_log_cleanup.checkpoints_then_bounded_retention`)."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from statecore.config import StatecoreConfig
from statecore.snapshot.log import LOG_CHECKPOINT_INTERVAL
from tests.object_store.conftest import S3Server
from tests.ops.test_retention_log_cleanup import checkpoints_then_bounded_retention


@pytest.mark.slow
def test_object_store_log_cleanup_bounded(s3_home: StatecoreConfig, s3_server: S3Server) -> None:
    output = f"s3://output/{s3_home.warehouse.rsplit('/', 1)[1]}/out"
    # few checkpoints: one log checkpoint to cut at (each request to the server costs)
    checkpoints_then_bounded_retention(
        s3_home, output, checkpoints=LOG_CHECKPOINT_INTERVAL + 3, retain=2
    )
    log = f"{output.removeprefix('s3://')}/_delta_log"
    names = {i.base_name for i in s3_server.filesystem().get_file_info(pafs.FileSelector(log))}
    assert "00000000000000000000.json" not in names and "_last_checkpoint" in names
