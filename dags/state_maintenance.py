"""
### state_maintenance

State maintenance of statecore jobs: **TTL cleanup → retention**, once per job it maintains.
It is scheduled on the checkpoint Asset of every job in `MAINTAINED_JOBS` (this file's list:
`clickstream`, `clickstream_stream`, `clickstream_query`, `clickstream_kafka`; add yours there)
and daily at 03:00 UTC:

- a run that a job's completed checkpoint triggered (the Asset `statecore://<job>` its DAG
  updates) maintains **that job**, each of them when checkpoints of several jobs triggered it
  (the job is read from the triggering Asset events, so `clickstream_kafka`'s checkpoints
  maintain `clickstream_kafka`, not `clickstream`);
- the 03:00 run, and a manual run with the defaults, maintain every job of `MAINTAINED_JOBS`
  that the catalog has (none yet: nothing runs, the `jobs` task says so);
- a manual run naming `job` maintains that job.

The `jobs` task lists the jobs (its XCom and log say why); `ttl_cleanup` and `retention` run
once per job (Airflow's dynamic task mapping: one task instance per job, its map index in the
UI).

- `ttl_cleanup`: removes the expired entries of every state with a TTL as a new maintenance
  checkpoint, merges small files per key group, and VACUUMs files no retained checkpoint needs.
  Its XCom (and log) reports rows and bytes reclaimed per state and key group.
- `retention`: first commits the pending output of completed checkpoints (a failed output
  commit, or a writer that stopped after the completion): its log names each pending
  checkpoint, its table, since when and why, then what was committed; a commit that cannot be
  made (a staged file gone) fails the task, naming the checkpoint and the files missing. Then
  it keeps the last `retain` completed checkpoints, expires the others, VACUUMs, and cuts the
  `_delta_log` of every table to what the retained checkpoints need.

**Params**
- `job`: the statecore job to maintain (default: the jobs the triggering checkpoints are of, or
  on the time schedule every job of `MAINTAINED_JOBS` the catalog has).
- `retain`: completed checkpoints to keep (default 7).
- `vacuum_retention_hours`: only files older than this are vacuumed (default 168, as Delta;
  empty: no VACUUM).
- `log_grace_seconds`: `_delta_log` entries younger than this stay, for readers in progress
  (default 3600, statecore's `LOG_GRACE`).
- `outputs`: the output and late-data Delta tables of `job` (one path a line), whose
  `_delta_log` is cut too (default: none; the catalog does not know them). They are one job's
  tables, so a run given `outputs` must name its `job`. A path that is not a Delta table fails
  the task before anything changes.
- `dry_run`: report what would be done, change nothing.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import AssetAny, AssetOrTimeSchedule, CronTriggerTimetable, Param, dag, task

from statecore_airflow import RETRIED, RetentionOperator, TtlCleanupOperator, checkpoint_asset

MAINTAINED_JOBS = ("clickstream", "clickstream_stream", "clickstream_query", "clickstream_kafka")
"""The jobs whose checkpoints (their Assets) trigger maintenance, and that the daily run
maintains: the bundled DAGs' jobs. A job of your own joins by its name here."""
VACUUM_HOURS = "{{ params.vacuum_retention_hours }}"
DRY_RUN = "{{ params.dry_run }}"
LOG_GRACE_SECONDS = 3600
"""statecore's ``LOG_GRACE`` (the DAG file does not import the library)."""


@dag(
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC"),
        assets=AssetAny(*(checkpoint_asset(job) for job in MAINTAINED_JOBS)),
    ),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args=RETRIED,
    max_active_runs=1,
    tags=["statecore", "operations"],
    doc_md=__doc__,
    params={
        "job": Param(
            None,
            type=["null", "string"],
            minLength=1,
            description="default: the jobs whose checkpoints triggered the run; on the time "
            "schedule, every job of MAINTAINED_JOBS the catalog has",
        ),
        "retain": Param(7, type="integer", minimum=1),
        "vacuum_retention_hours": Param(168, type=["null", "number"], minimum=0),
        "log_grace_seconds": Param(LOG_GRACE_SECONDS, type="number", minimum=0),
        "outputs": Param(
            [],
            type="array",
            items={"type": "string", "minLength": 1},
            description="The output and late-data Delta tables of job, one path a line.",
        ),
        "dry_run": Param(False, type="boolean"),
    },
)
def state_maintenance() -> None:
    @task
    def jobs(**context: Any) -> list[str]:
        """The jobs this run maintains: the `job` param's; else the jobs of the checkpoint
        Assets that triggered the run; else (the time schedule) every job of
        `MAINTAINED_JOBS` the catalog has."""
        import logging

        from statecore_airflow import StatecoreHook, job_of_asset

        log = logging.getLogger(__name__)
        params = context["params"]
        if params["job"]:
            return [params["job"]]
        if params["outputs"]:
            raise ValueError(
                f"outputs {params['outputs']} are one job's tables: name that job in the job "
                "param as well"
            )
        triggered = sorted(
            {job for job in (job_of_asset(a.uri) for a in context["triggering_asset_events"])}
            - {None}
        )
        if triggered:
            log.info("maintaining the jobs whose checkpoints triggered this run: %s", triggered)
            return triggered  # type: ignore[return-value]
        with StatecoreHook().catalog() as catalog:
            present = [job for job in MAINTAINED_JOBS if catalog.has_job(job)]
        log.info(
            "maintaining every job of MAINTAINED_JOBS the catalog has: %s (of %s)",
            present or "none",
            list(MAINTAINED_JOBS),
        )
        return present

    maintained = jobs()
    cleanup = TtlCleanupOperator.partial(
        task_id="ttl_cleanup", vacuum_retention_hours=VACUUM_HOURS, dry_run=DRY_RUN
    ).expand(job=maintained)
    retention = RetentionOperator.partial(
        task_id="retention",
        retain="{{ params.retain }}",
        vacuum_retention_hours=VACUUM_HOURS,
        log_grace_seconds="{{ params.log_grace_seconds }}",
        outputs="{{ params.outputs | tojson }}",
        dry_run=DRY_RUN,
    ).expand(job=maintained)
    cleanup >> retention


state_maintenance()
