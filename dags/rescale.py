"""
### rescale

Rescales a statecore job: **validate → savepoint → rescale → verify**.

Within the job's max parallelism only the parallelism changes (no state byte is rewritten); the
next run of the job restores the key-group ranges of the new parallelism. With
`max_parallelism` the state is rewritten into a new savepoint with key groups recomputed from the
stored keys, which becomes the job's latest checkpoint. `verify` fails the run unless every
state's key count, row count and checksum are the same before (the savepoint) and after.

**Params**
- `job`: the statecore job (default `clickstream`).
- `parallelism`: the new parallelism.
- `max_parallelism`: a new max parallelism (number of key groups); empty keeps the current one.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Param, dag, task

from statecore_airflow import RescaleOperator, SavepointOperator, StatecoreHook

JOB = "{{ params.job }}"


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["statecore", "operations"],
    doc_md=__doc__,
    params={
        "job": Param("clickstream", type="string", minLength=1),
        "parallelism": Param(2, type="integer", minimum=1, maximum=32768),
        "max_parallelism": Param(None, type=["null", "integer"], minimum=1, maximum=32768),
    },
)
def rescale() -> None:
    @task
    def validate(params: dict[str, Any]) -> dict[str, Any]:
        """Refuse a bad rescale before anything is written."""
        from statecore.catalog import Catalog
        from statecore.rescale import check_rescale

        config = StatecoreHook().get_config()
        with Catalog.connect(config.catalog_url) as catalog:
            job = catalog.get_job(params["job"])
        target = check_rescale(job, params["parallelism"], params["max_parallelism"])
        return {"job": job.name, "parallelism": params["parallelism"], "max_parallelism": target}

    @task
    def verify(savepoint: dict[str, Any], rescaled: dict[str, Any]) -> dict[str, Any]:
        """The state before (the savepoint) and after (the job's latest checkpoint) are equal."""
        from statecore.catalog import Catalog
        from statecore.diff import checksums
        from statecore.restore_point import checkpoint_point, load_savepoint

        config = StatecoreHook().get_config()
        before = {f"{c.operator}/{c.state}": c.to_dict()
                  for c in checksums(load_savepoint(savepoint["path"]))}
        with Catalog.connect(config.catalog_url) as catalog:
            after = {f"{c.operator}/{c.state}": c.to_dict()
                     for c in checksums(checkpoint_point(catalog, rescaled["job"]))}
            job = catalog.get_job(rescaled["job"])
        if before != after:
            raise ValueError(f"state differs after the rescale: before {before}, after {after}")
        if (job.parallelism, job.max_parallelism) != (rescaled["parallelism"],
                                                       rescaled["max_parallelism"]):
            raise ValueError(f"job {job.name!r} is at parallelism {job.parallelism} / max "
                             f"{job.max_parallelism}, not as rescaled: {rescaled}")
        return {"states": len(after), "keys": sum(c["keys"] or 0 for c in after.values()),
                "rows": sum(c["rows"] for c in after.values())}

    checked = validate()
    savepoint = SavepointOperator(task_id="savepoint", job=JOB)
    rescaled = RescaleOperator(
        task_id="rescale", job=JOB, parallelism="{{ params.parallelism }}",
        max_parallelism="{{ params.max_parallelism }}",
        savepoint="{{ ti.xcom_pull(task_ids='savepoint')['path'] }}")
    checked >> savepoint >> rescaled
    verify(savepoint.output, rescaled.output)


rescale()
