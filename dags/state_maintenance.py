"""
### state_maintenance

Daily state maintenance of a statecore job: **TTL cleanup → retention**. Its schedule is for
the `clickstream` job: it runs at 03:00 UTC and whenever `clickstream` completes a checkpoint
(the Asset `statecore://clickstream` that `stateful_pipeline` updates), and those runs maintain
`clickstream` (the default of `job`). Airflow fixes a schedule when it parses the DAG, so the
`job` param cannot move it: a manual trigger naming another job maintains that job once, and a
job of its own to maintain on schedule needs a copy of this DAG with its `SCHEDULED_JOB`.

- `ttl_cleanup`: removes the expired entries of every state with a TTL as a new maintenance
  checkpoint, merges small files per key group, and VACUUMs files no retained checkpoint needs.
  Its XCom (and log) reports rows and bytes reclaimed per state and key group.
- `retention`: keeps the last `retain` completed checkpoints, expires the others, VACUUMs, and
  cuts the `_delta_log` of every table to what the retained checkpoints need.

**Params**
- `job`: the statecore job (default: the scheduled one, `clickstream`).
- `retain`: completed checkpoints to keep (default 7).
- `vacuum_retention_hours`: only files older than this are vacuumed (default 168, as Delta;
  empty: no VACUUM).
- `log_grace_seconds`: `_delta_log` entries younger than this stay, for readers in progress
  (default 3600, statecore's `LOG_GRACE`).
- `outputs`: the job's output and late-data Delta tables (one path a line), whose
  `_delta_log` is cut too (default: none; the catalog does not know them). A path that is not a
  Delta table fails the task before anything changes.
- `dry_run`: report what would be done, change nothing.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, Param, dag

from statecore_airflow import RetentionOperator, TtlCleanupOperator, checkpoint_asset

SCHEDULED_JOB = "clickstream"
"""The job whose checkpoints (its Asset) and daily time schedule this DAG, and the default of
its ``job`` param: one name, so the schedule and what a scheduled run maintains agree."""
JOB = "{{ params.job }}"
VACUUM_HOURS = "{{ params.vacuum_retention_hours }}"
DRY_RUN = "{{ params.dry_run }}"
LOG_GRACE_SECONDS = 3600
"""statecore's ``LOG_GRACE`` (the DAG file does not import the library)."""


@dag(
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC"),
        assets=[checkpoint_asset(SCHEDULED_JOB)],
    ),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["statecore", "operations"],
    doc_md=__doc__,
    params={
        "job": Param(
            SCHEDULED_JOB,
            type="string",
            minLength=1,
            description=f"Scheduled runs maintain {SCHEDULED_JOB!r}; a manual run, this job.",
        ),
        "retain": Param(7, type="integer", minimum=1),
        "vacuum_retention_hours": Param(168, type=["null", "number"], minimum=0),
        "log_grace_seconds": Param(LOG_GRACE_SECONDS, type="number", minimum=0),
        "outputs": Param(
            [],
            type="array",
            items={"type": "string", "minLength": 1},
            description="The job's output and late-data Delta tables, one path a line.",
        ),
        "dry_run": Param(False, type="boolean"),
    },
)
def state_maintenance() -> None:
    cleanup = TtlCleanupOperator(
        task_id="ttl_cleanup", job=JOB, vacuum_retention_hours=VACUUM_HOURS, dry_run=DRY_RUN
    )
    retention = RetentionOperator(
        task_id="retention",
        job=JOB,
        retain="{{ params.retain }}",
        vacuum_retention_hours=VACUUM_HOURS,
        log_grace_seconds="{{ params.log_grace_seconds }}",
        outputs="{{ params.outputs | tojson }}",
        dry_run=DRY_RUN,
    )
    cleanup >> retention


state_maintenance()
