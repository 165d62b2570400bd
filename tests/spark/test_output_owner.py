"""One writer per output table: the catalog binds an output (or late-data) table to the job and
operator that first write it, and refuses any other before its tasks run (real Spark; the table
read back with DuckDB)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statecore.catalog import Catalog
from statecore.errors import OutputOwnedError
from statecore.snapshot.output import output_table_key
from statecore.spark import keyed_process, keyed_stream

from .test_output_table import run_per_record, table_rows
from .test_vectorized import INPUT, OUTPUT, PerRecordSum, events

pytestmark = pytest.mark.spark


def _run(spark: Any, out: Path, *, job: str, operator: str = "main", **extra: Any) -> Any:
    return keyed_process(
        spark.createDataFrame(events(100, 50), INPUT),
        key="user",
        function=PerRecordSum(),
        output_schema=OUTPUT,
        job=job,
        operator=operator,
        checkpoint_id=1,
        parallelism=2,
        order_by=["seq"],
        **extra,
    )


def test_output_owner_a_second_job_is_refused_before_writing(
    spark: Any, statecore_home: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    run_per_record(spark, events(0, 100), 1, out)  # job "sink" owns the table
    rows, files = table_rows(out), sorted(p.name for p in out.rglob("*"))
    with pytest.raises(OutputOwnedError, match=rf"output table {out} is written by job 'sink'.*"
                       r"job 'other', operator 'main' \(output\) cannot write it"):  # fmt: skip
        _run(spark, Path(f"{out}/"), job="other", output_table=f"{out}/")
    assert table_rows(out) == rows
    assert sorted(p.name for p in out.rglob("*")) == files  # not a file written
    with Catalog.connect(statecore_home.catalog_url) as catalog:
        assert not catalog.has_job("other")
        owner = catalog.output_owner(output_table_key(str(out)))
        assert owner is not None and (owner.job, owner.operator) == ("sink", "main")


def test_output_owner_a_second_operator_or_a_late_data_table_is_refused(
    spark: Any, statecore_home: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    run_per_record(spark, events(0, 100), 1, out)
    rows = table_rows(out)
    with pytest.raises(OutputOwnedError, match="operator 'enrich'"):
        _run(spark, out, job="sink", operator="enrich", output_table=str(out))
    with pytest.raises(OutputOwnedError, match=r"late-data table .*\(output\)"):
        _run(
            spark,
            out,
            job="sink",
            output_table=str(tmp_path / "other"),
            event_time="seq",
            late_data="table",
            late_output_table=str(out),
        )
    assert table_rows(out) == rows
    assert not (tmp_path / "other").exists()
    with Catalog.connect(statecore_home.catalog_url) as catalog:  # all bound, or none
        assert catalog.output_owner(output_table_key(str(tmp_path / "other"))) is None


def test_output_owner_a_stream_is_refused_before_its_query_starts(
    spark: Any, statecore_home: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    run_per_record(spark, events(0, 100), 1, out)
    (tmp_path / "input").mkdir()
    active = len(spark.streams.active)
    with pytest.raises(OutputOwnedError, match="job 'clicks', operator 'main'"):
        keyed_stream(
            spark.readStream.schema(INPUT).json(str(tmp_path / "input")),
            key="user",
            function=PerRecordSum(),
            output_schema=OUTPUT,
            job="clicks",
            checkpoint_location=str(tmp_path / "query"),
            output_table=str(out),
        )
    assert len(spark.streams.active) == active
    assert not (tmp_path / "query").exists()
