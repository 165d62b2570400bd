"""The DAG runs that published a statecore checkpoint Asset, read from Airflow's metadata database.

A DAG whose task has the outlet ``checkpoint_asset(job)`` (``statecore://<job>``) records an
asset event when the task succeeds, with its DAG and run ids. This reads those events and their
runs (start, end, logical date, the ``date`` param) as :class:`~statecore.ops.overview.DagRunRef`;
:func:`statecore.ops.overview.link_runs` then ties each to the checkpoint it completed. It runs
inside the API server, which holds the metadata database's session.

:func:`job_dags` gives each job the DAGs that ever published its Asset: who may read a job
follows them (:mod:`statecore_airflow.ui.access`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statecore_airflow.assets import SCHEME

if TYPE_CHECKING:
    from statecore.ops.overview import DagRunRef

__all__ = ["job_dags", "published_runs"]

LIMIT = 200  # the most recent events shown


def published_runs(
    *, job: str | None = None, dag_id: str | None = None, run_id: str | None = None
) -> list[DagRunRef]:
    """The most recent runs (newest first) that published ``statecore://<job>`` (any job when
    ``None``), optionally only those of ``dag_id`` / ``run_id``."""
    import sqlalchemy as sa
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from statecore.ops.overview import DagRunRef

    prefix = f"{SCHEME}://"
    query = (
        sa.select(AssetEvent, AssetModel.uri)
        .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
        .where(AssetEvent.source_run_id.is_not(None))
        .order_by(AssetEvent.timestamp.desc())
        .limit(LIMIT)
    )
    if job is not None:
        query = query.where(AssetModel.uri.in_([prefix + job, f"{prefix}{job}/"]))
    else:
        query = query.where(AssetModel.uri.startswith(prefix))
    if dag_id is not None:
        query = query.where(AssetEvent.source_dag_id == dag_id)
    if run_id is not None:
        query = query.where(AssetEvent.source_run_id == run_id)
    refs: list[DagRunRef] = []
    seen: set[tuple[str, str, str]] = set()
    with create_session() as session:
        for event, uri in session.execute(query):
            key = (event.source_dag_id, event.source_run_id, uri)
            if key in seen:
                continue
            seen.add(key)
            run = session.scalar(
                sa.select(DagRun).where(
                    DagRun.dag_id == event.source_dag_id, DagRun.run_id == event.source_run_id
                )
            )
            conf: dict[str, Any] = (run.conf or {}) if run is not None else {}
            refs.append(
                DagRunRef(
                    dag_id=event.source_dag_id,
                    run_id=event.source_run_id,
                    job=uri[len(prefix) :].rstrip("/"),  # Airflow stores statecore://job/
                    started_at=run.start_date if run is not None else None,
                    ended_at=(run.end_date if run is not None else None) or event.timestamp,
                    logical_date=run.logical_date if run is not None else None,
                    run_after=run.run_after if run is not None else None,
                    conf_date=conf.get("date") if isinstance(conf.get("date"), str) else None,
                    extra=dict(event.extra or {}),
                )
            )
    return refs


def job_dags() -> dict[str, frozenset[str]]:
    """Each job with the DAGs whose runs published ``statecore://<job>``, over every event."""
    import sqlalchemy as sa
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    prefix = f"{SCHEME}://"
    query = (
        sa.select(AssetModel.uri, AssetEvent.source_dag_id)
        .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
        .where(AssetEvent.source_dag_id.is_not(None), AssetModel.uri.startswith(prefix))
        .distinct()
    )
    found: dict[str, set[str]] = {}
    with create_session() as session:
        for uri, dag_id in session.execute(query):
            found.setdefault(uri[len(prefix) :].rstrip("/"), set()).add(dag_id)
    return {job: frozenset(dags) for job, dags in found.items()}
