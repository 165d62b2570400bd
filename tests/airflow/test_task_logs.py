"""Quiet task logs: a DAG's Spark task (``stateful_pipeline``'s ``clickstream``, run with
``dag.test`` on one small day) logs statecore's lines and Spark's warnings and errors, not Spark's
INFO (``conf/spark/log4j2.properties``, the ``SPARK_CONF_DIR`` of the project's Airflow), and no
DeprecationWarning (Airflow's reading of ``plugins/.airflowignore``, filtered by the project's
``PYTHONWARNINGS``). Before, the same run logged 466 Spark INFO lines and the warning twice."""

from __future__ import annotations

import re

import pytest

from statecore.cli.demo import generate_clickstream
from tests.airflow.dagrun import run_dags

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

SPARK_INFO = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ")
"""A line of Spark's log4j console pattern (``%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m``) at INFO."""


@pytest.fixture(scope="module")
def run_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The output of ``dag.test`` of stateful_pipeline for 2026-01-01 (the tasks' logs)."""
    home = tmp_path_factory.mktemp("logs") / "home"
    generate_clickstream(home / "data" / "clickstream", days=1, users=20, events_per_day=200)
    [run] = run_dags(home, [("stateful_pipeline", {"date": "2026-01-01"})])
    assert run["tasks"] == {"check": "success", "clickstream": "success"}
    return (home / "dag-runs.log").read_text()


def spark_task_lines(log: str) -> list[str]:
    """The lines of the run's Spark task: from its spark-submit command to the task's end."""
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if "Spark-Submit cmd:" in line)
    end = next(i for i in range(start, len(lines)) if "::group::Post Execute" in lines[i])
    return lines[start:end]


def test_documented_path_task_log_has_statecore_lines_not_spark_info(run_log: str) -> None:
    task = spark_task_lines(run_log)
    assert [line for line in task if SPARK_INFO.search(line)] == []
    assert not any("Using Spark's default log4j profile" in line for line in task)
    assert not any("INFO py4j" in line for line in task)
    # statecore's logging and the job's own line are there: what the run did
    assert any(
        "INFO statecore.spark.keyed: job clickstream: checkpoint 20260101" in line for line in task
    )
    assert any(
        "2026-01-01: 200 events, checkpoint 20260101 complete with" in line for line in task
    ), "\n".join(task)
    assert len(task) < 40, "\n".join(task)


def test_documented_path_task_log_has_no_deprecation_warning(run_log: str) -> None:
    assert "DeprecationWarning" not in run_log.replace("StarletteDeprecationWarning", "")
    assert "GitWildMatchPattern" not in run_log
