"""The Spark runs of ``test_operations_dags.py``, in a subprocess with a local Spark of its own.

``python -m tests.airflow.ops_jobs STEP...`` runs each step, a JSON object made by
:func:`clickstream_day` or :func:`sessions_visits`, in order on one local Spark session
(``local[2]``), and :func:`run_steps` runs that from the test. The test thus takes no Spark
session of the test run and stays out of the ``jvm`` group (``tests/groups.py``), the long pole
of ``make test``; each call costs a JVM start instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

from jobs import clickstream
from statecore.config import StatecoreConfig
from statecore.spark.session import build_session
from statecore.ttl import ManualTimeProvider
from tests.spark import ttl_job

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 900
"""Seconds for one call's steps: a few minutes at most on a loaded 2-core machine."""


def checkpoint_of(day: date) -> int:
    """The checkpoint id of a day's clickstream run: ``YYYYMMDD``."""
    return int(day.strftime("%Y%m%d"))


def clickstream_day(home: Path, data: Path, day: date, **options: Any) -> dict[str, Any]:
    """A step: the clickstream job on ``data``'s partition of ``day`` (checkpoint
    :func:`checkpoint_of`) with STATECORE_HOME ``home`` and ``options`` of
    :func:`jobs.clickstream.run`."""
    return {
        "job": "clickstream",
        "home": str(home),
        "data": str(data),
        "day": day.isoformat(),
        "options": options,
    }


def sessions_visits(
    home: Path, users: list[str], page: str, *, checkpoint_id: int, now: int
) -> dict[str, Any]:
    """A step: one checkpoint of the TTL job (``tests/spark/ttl_job.py``), a visit of ``page``
    by each of ``users`` with the processing time at ``now`` (ms since the epoch)."""
    return {
        "job": "sessions",
        "home": str(home),
        "users": users,
        "page": page,
        "checkpoint_id": checkpoint_id,
        "now": now,
    }


def run_steps(steps: list[dict[str, Any]], log: Path) -> None:
    """Run ``steps`` in a subprocess (its own process group, killed once it ends, the JVM with
    it); its output goes to ``log``, whose tail a failure shows."""
    env = dict(os.environ)
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    )
    command = [sys.executable, "-m", "tests.airflow.ops_jobs", *map(json.dumps, steps)]
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    tail = log.read_text(errors="replace")[-6000:]
    assert returncode == 0, f"Spark steps ended with {returncode} (log {log}):\n{tail}"


def run_step(spark: Any, step: dict[str, Any]) -> None:
    config = StatecoreConfig.resolve(home=step["home"], env={})
    if step["job"] == "clickstream":
        day = date.fromisoformat(step["day"])
        events = spark.read.parquet(str(Path(step["data"]) / f"date={day.isoformat()}"))
        clickstream.run(
            spark, events, checkpoint_id=checkpoint_of(day), config=config, **step["options"]
        ).unpersist()
    else:
        ttl_job.run(
            spark,
            ttl_job.visits(spark, step["users"], step["page"]),
            checkpoint_id=step["checkpoint_id"],
            config=config,
            clock=ManualTimeProvider(step["now"]),
        )


def main(argv: list[str]) -> int:
    spark = build_session(
        master="local[2]",
        app_name="statecore-ops-jobs",
        config={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",  # the log's tail shows a failure
            "spark.sql.shuffle.partitions": "2",
        },
        log_level="ERROR",
    )
    for step in map(json.loads, argv):
        run_step(spark, step)
        print(f"done: {step['job']} {step.get('day', step.get('checkpoint_id'))}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
