"""
### permission_shops

Two DAGs for `tests/airflow/test_permission_ui.py`, each running its own job as `ui_page_pipeline`
does (in-process, no Spark): `shop_a` checkpoints the job `shop_east` and publishes
`statecore://shop_east`, `shop_b` the job `shop_west` and `statecore://shop_west`.

**Params**: `date` (`YYYY-MM-DD`, the checkpoint id is `YYYYMMDD`).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task

from statecore_airflow import checkpoint_asset

JOBS = {"shop_a": "shop_east", "shop_b": "shop_west"}
"""Each DAG and the job it runs."""


def shop_dag(dag_id: str, job: str) -> None:
    @dag(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        doc_md=__doc__,
        params={"date": Param("2026-01-02", type="string", format="date")},
    )
    def pipeline() -> None:
        @task(outlets=[checkpoint_asset(job)])
        def checkpoint(params: dict[str, str] | None = None) -> int:
            from statecore.config import StatecoreConfig
            from tests.inprocess import run_checkpoint
            from tests.ops.shopstate import Shop, day_records

            day = pendulum.parse((params or {})["date"]).day
            _, record = run_checkpoint(
                StatecoreConfig.resolve(),
                Shop(),
                day_records(day),
                job=job,
                checkpoint_id=20260100 + day,
            )
            return record.checkpoint_id

        checkpoint()

    pipeline()


for _dag_id, _job in JOBS.items():
    shop_dag(_dag_id, _job)
