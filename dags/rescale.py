"""
### rescale

Rescales a statecore job: **validate → savepoint → rescale → verify**. The savepoint is a pin on
the latest checkpoint (a catalog row, no copy of the state), which retention and VACUUM keep
until it is deleted (`statecore savepoints delete NAME --job JOB`).

Within the job's max parallelism only the parallelism changes (no state byte is rewritten); the
next run of the job restores the key-group ranges of the new parallelism. With
`max_parallelism` the state is rewritten into a new savepoint with key groups recomputed from the
stored keys, which becomes the job's latest checkpoint.

A run of the job that completes between the savepoint and the rescale neither fails the rescale nor
is rewound: the rescale holds the job's lease from the moment it reads the latest checkpoint until
it is done (a run starting meanwhile is refused with `MaintenanceLockedError` naming the rescale,
before it writes anything; a retry of its task runs it afterwards), and when the savepoint is of an
earlier checkpoint of the job it pins the latest one itself and rescales that (its log says so; the
savepoint task's savepoint is kept). `verify` fails the run unless every state's key count, row
count and checksum are the same before (the savepoint the rescale started from) and after (the
checkpoint the rescale left, whatever run of the job completed since;
`statecore.ops.rescale.verify_rescale`). A run that would change nothing (the job is already at
`parallelism` and the max parallelism) is skipped by `validate`, the reason ("no-op: ...") in its
log, before a savepoint is taken: the Trigger form's defaults (`parallelism` 2) on a job at
parallelism 2 do that.

**Params**
- `job`: the statecore job (default `clickstream`).
- `parallelism`: the new parallelism.
- `max_parallelism`: a new max parallelism (number of key groups); empty keeps the current one.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Param, dag, task

from statecore_airflow import RETRIED, RescaleOperator, SavepointOperator, StatecoreHook

JOB = "{{ params.job }}"


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args=RETRIED,
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
        """Refuse a bad rescale before anything is written; skip one that changes nothing."""
        from airflow.sdk.exceptions import AirflowSkipException

        from statecore.ops.rescale import check_rescale

        with StatecoreHook().catalog() as catalog:
            job = catalog.get_job(params["job"])
            latest = catalog.latest_checkpoint(job.name)
        target = check_rescale(job, params["parallelism"], params["max_parallelism"])
        current_max = latest.max_parallelism if latest else job.max_parallelism
        if (params["parallelism"], target) == (job.parallelism, current_max):
            raise AirflowSkipException(
                f"no-op: job {job.name!r} is already at parallelism {job.parallelism} and max "
                f"parallelism {current_max}; nothing to rescale"
            )
        return {"job": job.name, "parallelism": params["parallelism"], "max_parallelism": target}

    @task
    def verify(rescaled: dict[str, Any]) -> dict[str, Any]:
        """The state before (the savepoint the rescale started from) and after (the checkpoint
        the rescale left: a new one past the max parallelism, else the savepoint's own) are
        equal, whatever run of the job completed since."""
        from statecore.ops.rescale import verify_rescale

        after = rescaled["checkpoint_id"]
        with StatecoreHook().catalog() as catalog:
            check = verify_rescale(
                catalog,
                rescaled["job"],
                savepoint=rescaled["savepoint"],
                parallelism=rescaled["parallelism"],
                max_parallelism=rescaled["max_parallelism"],
                checkpoint_id=rescaled["savepoint_checkpoint_id"] if after is None else after,
            )
        return check.to_dict()

    checked = validate()
    savepoint = SavepointOperator(task_id="savepoint", job=JOB)
    rescaled = RescaleOperator(
        task_id="rescale",
        job=JOB,
        parallelism="{{ params.parallelism }}",
        max_parallelism="{{ params.max_parallelism }}",
        savepoint="{{ ti.xcom_pull(task_ids='savepoint')['name'] }}",
    )
    checked >> savepoint >> rescaled
    rescaled >> verify(rescaled.output)


rescale()
