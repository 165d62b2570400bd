"""
### savepoint

Takes a savepoint of a statecore job's latest checkpoint. By default a **pin**: the catalog keeps
the checkpoint's table versions under the savepoint's name (nothing is copied), and retention and
VACUUM keep their files until it is deleted (`statecore savepoints delete NAME --job JOB`). With
`export`, a self-contained copy (own Delta tables plus `_savepoint.json`) that relocates and
restores with an empty catalog. Either restores with `stateful_pipeline` param `from_savepoint`
(a pin by its name) or `statecore savepoints restore`.

**Params**
- `job`: the statecore job (default `clickstream`).
- `name`: the savepoint's name; default: job, reason and time.
- `export`: copy the state into a folder instead of pinning it.
- `target`: an export's parent folder; default `<warehouse>/_savepoints/<job>`.

The task's XCom is `{"job", "name", "kind", "path", "checkpoint_id", "rows", "bytes"}` (`path`:
an export's folder, `null` for a pin).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from statecore_airflow import RETRIED, SavepointOperator


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args=RETRIED,
    tags=["statecore", "operations"],
    doc_md=__doc__,
    params={
        "job": Param("clickstream", type="string", minLength=1),
        "name": Param(None, type=["null", "string"], pattern="^[A-Za-z0-9][A-Za-z0-9._-]*$"),
        "export": Param(False, type="boolean"),
        "target": Param(None, type=["null", "string"]),
    },
)
def savepoint() -> None:
    SavepointOperator(
        task_id="savepoint",
        job="{{ params.job }}",
        name="{{ params.name or '' }}",
        target="{{ params.target or '' }}",
        export="{{ params.export }}",
    )


savepoint()
