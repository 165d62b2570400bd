"""
### ui_page_pipeline

A stand-in for `stateful_pipeline` without Spark (for `tests/airflow/test_ui_page.py`): one task
checkpoints a day of the `shop` job in-process and publishes the job's checkpoint Asset
(`statecore://shop`), as the Spark task of `stateful_pipeline` does.

**Params**: `date` (`YYYY-MM-DD`, the checkpoint id is `YYYYMMDD`).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task

from statecore_airflow import checkpoint_asset


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    doc_md=__doc__,
    params={"date": Param("2026-01-02", type="string", format="date")},
)
def ui_page_pipeline() -> None:
    @task(outlets=[checkpoint_asset("shop")])
    def checkpoint(params: dict[str, str] | None = None) -> int:
        from statecore.config import StatecoreConfig
        from tests.ops.shopstate import run_day

        day = pendulum.parse((params or {})["date"]).day
        return run_day(StatecoreConfig.resolve(), day).checkpoint_id

    checkpoint()


ui_page_pipeline()
