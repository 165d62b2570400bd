"""Who may read which job on the statecore page: Airflow's auth manager decides, through the DAGs.

A job's checkpoints are what its DAGs' runs made, so a user may read a job (its row, page,
checkpoints, savepoints and key lookups) when the auth manager lets them read at least one DAG
whose run published the job's checkpoint Asset (:func:`statecore_airflow.ui.runs.job_dags`).
A job no DAG ever ran is shown only to a user who may read every DAG. A DAG run's row and tab
follow its DAG. The questions are Airflow's own, asked as its DAG-run list asks them:
``is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN, details=DagDetails())``
for "every DAG", and ``get_authorized_dag_ids(method="GET")`` for the DAGs one by one (asked
only when the first answer is no), once per request.

A job the user may not read is answered as an unknown one (404, without the catalog's list of
known jobs), so the page does not tell that it exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep

from statecore.errors import JobNotFoundError
from statecore_airflow.ui.runs import job_dags

__all__ = ["JobAccess", "job_access"]


@dataclass(frozen=True, kw_only=True)
class JobAccess:
    """What one user may read: every DAG, or ``dag_ids``; ``jobs_dags`` maps each job to the
    DAGs that ran it (empty when the user may read every DAG: it is not needed then)."""

    all_dags: bool
    dag_ids: frozenset[str] = frozenset()
    jobs_dags: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def may_read_dag(self, dag_id: str) -> bool:
        return self.all_dags or dag_id in self.dag_ids

    def may_read(self, job: str) -> bool:
        """Whether the user may read ``job``: a DAG of theirs ran it, or they read every DAG."""
        return self.all_dags or any(
            self.may_read_dag(dag) for dag in self.jobs_dags.get(job, frozenset())
        )

    def check(self, job: str) -> None:
        """:class:`~statecore.errors.JobNotFoundError` (404) unless the user may read ``job``;
        its message is the same whether the job exists or not."""
        if not self.may_read(job):
            raise JobNotFoundError(
                f"job {job!r} is not in the checkpoint catalog, or you may not read it"
            )


def job_access(user: GetUserDep) -> JobAccess:
    """The calling user's :class:`JobAccess` (a FastAPI dependency)."""
    auth_manager = get_auth_manager()
    every_dag = auth_manager.is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.RUN, details=DagDetails(), user=user
    )
    if every_dag:
        return JobAccess(all_dags=True)
    readable = auth_manager.get_authorized_dag_ids(user=user, method="GET")
    return JobAccess(all_dags=False, dag_ids=frozenset(readable), jobs_dags=job_dags())
