"""
### savepoint

Takes a savepoint of a statecore job: a self-contained copy of its latest checkpoint (own Delta
tables plus `_savepoint.json`), which survives checkpoint retention and VACUUM and restores with an
empty catalog (`stateful_pipeline` param `from_savepoint`, or `statecore savepoints restore`).

**Params**
- `job`: the statecore job (default `clickstream`).
- `name`: the savepoint's name; default: job, reason and time.
- `target`: the parent folder; default `<warehouse>/_savepoints/<job>`.

The task's XCom is `{"job", "name", "path", "checkpoint_id", "rows", "bytes"}`.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from statecore_airflow import SavepointOperator


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["statecore", "operations"],
    doc_md=__doc__,
    params={
        "job": Param("clickstream", type="string", minLength=1),
        "name": Param(None, type=["null", "string"], pattern="^[A-Za-z0-9][A-Za-z0-9._-]*$"),
        "target": Param(None, type=["null", "string"]),
    },
)
def savepoint() -> None:
    SavepointOperator(
        task_id="savepoint",
        job="{{ params.job }}",
        name="{{ params.name or '' }}",
        target="{{ params.target or '' }}",
    )


savepoint()
