"""A Delta ``readStream`` of each of some output tables into a Parquet sink of its own
(``SINKS/<table's name>``), until SIGTERM (the month test's second reader,
``tests/airflow/month.py``): ``python month_stream_reader.py SINKS TABLE [TABLE...]``.

It reads the table as any downstream streaming consumer would (no ``skipChangeCommits``, no
``ignoreChanges``): a commit that removes rows fails it, and the test sees that as its exit code.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from statecore.spark.session import build_session


def main(sinks: str, tables: list[str]) -> int:
    spark = build_session(
        master="local[1]",
        app_name="month-readstream",
        log_level="ERROR",
        config={  # small tables: one partition where Delta and Spark default to 50 and 200
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "1",
            "spark.databricks.delta.snapshotPartitions": "1",
        },
    )
    queries = []
    for table in tables:
        sink = f"{sinks}/{Path(table).name}"
        queries.append(
            spark.readStream.format("delta")
            .load(table)
            .select("user_id", "ts")
            .writeStream.format("parquet")
            .option("checkpointLocation", f"{sink}-checkpoint")
            .trigger(processingTime="3 seconds")
            .start(sink)
        )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    while not stopping and all(query.isActive for query in queries):
        time.sleep(1)
    ended = [query for query in queries if not query.isActive]
    for query in ended:
        print(f"readStream {query.name or query.id} ended: {query.exception()}", flush=True)
    if ended:
        return 3
    for query in queries:
        query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
