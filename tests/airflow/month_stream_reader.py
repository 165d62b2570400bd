"""A Delta ``readStream`` of an output table into a Parquet sink, until SIGTERM (the month test's
second reader, ``tests/airflow/month.py``): ``python month_stream_reader.py TABLE SINK``.

It reads the table as any downstream streaming consumer would (no ``skipChangeCommits``, no
``ignoreChanges``): a commit that removes rows fails it, and the test sees that as its exit code.
"""

from __future__ import annotations

import signal
import sys
import time

from statecore.spark.session import build_session


def main(table: str, sink: str) -> int:
    spark = build_session(master="local[1]", app_name="month-readstream", log_level="ERROR")
    query = (
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
    while not stopping and query.isActive:
        time.sleep(1)
    if not query.isActive:
        print(f"readStream ended: {query.exception()}", flush=True)
        return 3
    query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
