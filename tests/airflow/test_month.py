"""A month on one home (issue 33): one Airflow with its real scheduler (``airflow scheduler`` +
``airflow dag-processor``, LocalExecutor, PostgreSQL, parallelism 2) runs the bundled DAGs over 30
past logical days by backfills, while a DuckDB reader and a Delta ``readStream`` poll the output
tables and runs are SIGKILLed at random commit phases (``tests/airflow/month_run.py``).

Checks: every DAG run succeeded or skipped with a reason; every input record is in the outputs
exactly once; no reader ever saw a row that later vanished (and the ``readStream`` never
failed); every retained checkpoint replays to the rows its catalog row records; files, log
entries and catalog rows stay bounded. ``benchmarks/month.py`` runs a longer month.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.airflow.month_run import MonthPlan, judge, run_month

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]


def test_month_on_one_home(tmp_path: Path) -> None:
    result = run_month(tmp_path / "home", MonthPlan())
    failed = judge(result)
    summary = {
        "seconds": {k: round(v) for k, v in result.seconds.items()},
        "kill points": result.kill_points,
        "fired": result.fired,
        "runs": len(result.runs),
        "reader polls": result.reader_polls,
        "sizes": result.sizes,
    }
    print(json.dumps(summary, indent=1, default=str))
    assert not failed, "\n".join([*failed, json.dumps(summary, default=str)])
