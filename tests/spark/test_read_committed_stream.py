"""A Delta ``readStream`` (Spark Structured Streaming with delta-spark) over a job's output table
runs throughout a run whose checkpoint fails after its state tables committed: it never fails
(no statecore commit removes data) and ends with every completed checkpoint's rows once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from statecore.catalog import Catalog, CheckpointStatus
from statecore.snapshot import faults
from statecore.spark.session import has_delta

from .test_output_table import run_per_record
from .test_vectorized import events, expected_running

pytestmark = pytest.mark.spark


class Injected(Exception):
    """The failure the test injects."""


def test_read_committed_delta_read_stream_survives_a_failed_checkpoint(
    spark: Any, statecore_home: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not has_delta(spark):
        pytest.fail("the test session has no Delta Lake (run `make jars`)")
    out = tmp_path / "out"
    batches = [events(0, 120), events(120, 80), events(200, 60)]
    run_per_record(spark, batches[0], 1, out)
    query = (
        spark.readStream.format("delta")
        .load(str(out))
        .writeStream.format("memory")
        .queryName("read_committed_out")
        .option("checkpointLocation", str(tmp_path / "reader"))
        .outputMode("append")
        .start()
    )
    try:
        query.processAllAvailable()

        def fail(name: str) -> None:  # the driver's commit phase fails before the completion
            if name == "catalog:complete:before":
                raise Injected(name)

        monkeypatch.setattr(faults, "_ARMED", "in-process")
        monkeypatch.setattr(faults, "_reach", fail)
        with pytest.raises(Injected):
            run_per_record(spark, batches[1], 2, out)
        monkeypatch.setattr(faults, "_ARMED", None)  # off again
        query.processAllAvailable()
        seen = spark.sql("SELECT user, amount, running FROM read_committed_out").collect()
        assert sorted(map(tuple, seen)) == expected_running(batches[0].iloc[:0], batches[0])
        run_per_record(spark, batches[1], 2, out)  # the retry
        run_per_record(spark, batches[2], 3, out)
        query.processAllAvailable()
        assert query.exception() is None and query.isActive
        seen = spark.sql("SELECT user, amount, running FROM read_committed_out").collect()
    finally:
        query.stop()
    everything = pd.concat(batches)
    assert sorted(map(tuple, seen)) == expected_running(everything.iloc[:0], everything)
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert catalog.get_checkpoint("sink", 2).status is CheckpointStatus.COMPLETED
