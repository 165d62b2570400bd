"""``statecore sql --engine spark`` over a warehouse on S3 (a real S3 API server on loopback):
the command a user types, in a process of its own (its own Spark, S3A from ``make jars``: hadoop-aws
and the AWS SDK's S3 client), answers as DuckDB's ``statecore sql`` does, and names no credential.

The job runs on the suite's one Spark session (its tasks write the state to S3); its second
checkpoint is a changelog checkpoint, so Spark SQL merges pending change files read over S3A.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import types as T

from statecore.catalog import Catalog
from statecore.config import StatecoreConfig
from statecore.descriptors import ValueStateDescriptor
from statecore.runtime import Context, KeyedProcessFunction, RuntimeContext
from statecore.snapshot.changelog import ChangelogConfig
from statecore.spark import keyed_process
from statecore.spark.session import jars_folder
from tests.object_store.conftest import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

JOB = "clicks"
QUERY = "SELECT key, value FROM clicks.total ORDER BY key"
"""The command of docs/object-storage.md: ``statecore sql --engine spark "SELECT key, value FROM
clicks.total ORDER BY key"``."""
CLICKS = {1: {"ann": 3, "bob": 1, "cy": 2}, 2: {"ann": 1, "dee": 5}}
OUTPUT = T.StructType([T.StructField("user", T.StringType()), T.StructField("n", T.LongType())])


class CountClicks(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ValueStateDescriptor("total", int, default=0))

    def process_element(self, value: Any, ctx: Context) -> Iterator[tuple[str, int]]:
        self.total.update(self.total.value() + value.clicks)
        yield ctx.current_key, self.total.value()


def statecore(*args: str) -> subprocess.CompletedProcess[str]:
    """``statecore ARGS`` as a user runs it: this venv's script, this process's environment
    (the S3 settings and credentials, ``STATECORE_HOME``, ``STATECORE_WAREHOUSE``);
    ``SPARK_PRINT_LAUNCH_COMMAND`` makes spark-submit print its command line to stderr."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "statecore"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SPARK_PRINT_LAUNCH_COMMAND": "1"},
    )


def test_object_store_spark_sql_over_s3(
    s3_spark: Any, s3_home: StatecoreConfig, s3_server: S3Server
) -> None:
    if not any(jars_folder().glob("hadoop-aws-*.jar")):
        pytest.skip("hadoop-aws is not in .venv/jars: run `make jars` (make test does)")
    pending = ChangelogConfig(materialize_every=3, max_change_ratio=100.0)
    for checkpoint_id, clicks in CLICKS.items():
        df = s3_spark.createDataFrame(
            pd.DataFrame({"user": list(clicks), "clicks": list(clicks.values())}),
            "user string, clicks bigint",
        )
        keyed_process(
            df,
            key="user",
            function=CountClicks(),
            output_schema=OUTPUT,
            job=JOB,
            checkpoint_id=checkpoint_id,
            parallelism=2,
            config=s3_home,
            output_table=f"{s3_home.warehouse}-out",
            changelog=pending,
        )
    with Catalog.connect(s3_home.catalog_url) as catalog:
        latest = catalog.latest_checkpoint(JOB)
    assert latest is not None and latest.checkpoint_id == 2
    assert {t.table_kind for t in latest.tables} >= {"keyed", "changes"}  # pending changes
    assert all(t.path.startswith(f"{s3_home.warehouse}/{JOB}/") for t in latest.tables)

    readme = (Path(__file__).resolve().parents[2] / "docs" / "object-storage.md").read_text()
    assert f'statecore sql --engine spark "{QUERY}"' in readme  # the command the docs show
    started = time.monotonic()
    spark_sql = statecore("sql", "--engine", "spark", QUERY)
    spark_seconds = time.monotonic() - started
    duckdb_sql = statecore("sql", QUERY)
    assert spark_sql.returncode == 0, spark_sql.stderr[-5000:]
    assert duckdb_sql.returncode == 0, duckdb_sql.stderr[-5000:]
    assert spark_sql.stdout == duckdb_sql.stdout
    rows = [line.split() for line in spark_sql.stdout.splitlines()[2:-1]]
    assert rows == [["ann", "4"], ["bob", "1"], ["cy", "2"], ["dee", "5"]]
    assert spark_sql.stdout.rstrip().endswith("(4 rows)")
    print(f"statecore sql --engine spark over S3: {spark_seconds:.1f} s")

    # The JVM read S3 through S3A with the settings of statecore.spark.session (its command
    # line is in stderr); no credential is on that command line or in what either printed.
    launch = next(line for line in spark_sql.stderr.splitlines() if "Spark Command:" in line)
    assert "spark.hadoop.fs.s3.impl=org.apache.hadoop.fs.s3a.S3AFileSystem" in launch
    assert f"spark.hadoop.fs.s3a.endpoint={s3_server.endpoint}" in launch
    assert "hadoop-aws-3.5.0.jar" in launch
    for where, text in {
        "spark stdout": spark_sql.stdout,
        "spark stderr (and spark-submit's command line)": spark_sql.stderr,
        "duckdb output": duckdb_sql.stdout + duckdb_sql.stderr,
    }.items():
        assert s3_server.secret not in text, where
        assert s3_server.env["AWS_ACCESS_KEY_ID"] not in text, where
