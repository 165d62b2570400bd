"""The fault suite's Spark job, run in a subprocess that a fault point may SIGKILL.

``python -m tests.faults.job --api record --backend heap --checkpoints 2,3 [--kill driver]``
runs those checkpoints of :mod:`tests.faults.scenario` on a local Spark (``local[2]``; with
``--task-retries N`` Spark retries a failed task N times) with the catalog and warehouse of the
environment (``STATECORE_HOME``, ``STATECORE_CATALOG_URL``). The fault point comes from the
environment too (:mod:`statecore.snapshot.faults`); ``--kill driver`` makes a point reached in a
Spark task kill this driver process rather than the task's Python worker.
"""

from __future__ import annotations

import argparse
import os
import sys

from statecore.config import StatecoreConfig
from statecore.snapshot.faults import FAULT_PID_ENV

from .scenario import APIS, ARROW_BATCH_ROWS, BACKENDS, SIDE_API, run_checkpoint

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto"
"""A short-lived JVM starts about 40 % faster with the client compiler only."""


def spark_session(task_retries: int = 0) -> object:
    from statecore.spark.session import build_session

    master = f"local[2,{task_retries + 1}]" if task_retries else "local[2]"
    return build_session(
        master=master,
        app_name="statecore-faults",
        config={
            "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
        },
        log_level="ERROR",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.faults.job")
    parser.add_argument("--api", choices=(*APIS, SIDE_API), required=True)
    parser.add_argument("--backend", choices=BACKENDS, required=True)
    parser.add_argument("--checkpoints", required=True, help="comma-separated checkpoint ids")
    parser.add_argument("--kill", choices=("driver", "worker"), default="worker")
    parser.add_argument("--task-retries", type=int, default=0)
    parser.add_argument("--retry-for", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.kill == "driver":  # before Spark starts, so that its workers inherit it
        os.environ[FAULT_PID_ENV] = str(os.getpid())
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = spark_session(args.task_retries)
    config = StatecoreConfig.resolve()
    for checkpoint_id in (int(c) for c in args.checkpoints.split(",")):
        run_checkpoint(
            spark,
            config,
            api=args.api,
            backend=args.backend,
            checkpoint_id=checkpoint_id,
            retry_for=args.retry_for,
        )
        print(f"checkpoint {checkpoint_id} done", flush=True)
    spark.stop()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
