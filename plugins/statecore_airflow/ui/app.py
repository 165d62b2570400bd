"""The statecore page's FastAPI app, mounted by Airflow's API server under ``/statecore``.

Airflow mounts a plugin's FastAPI app as it is: its own authentication does not apply to it. So
every route here depends on Airflow's own check,
``requires_access_view(AccessView.WEBSITE)`` (``airflow.api_fastapi.core_api.security``): the
caller must present Airflow's JWT, as the ``_token`` cookie the UI sets at login or as
``Authorization: Bearer``, and the auth manager must let that user see the website. Without it
an API route answers 401 (403 for a user who may not), and a page asks the browser to log in
(a redirect to the auth manager's login page, back here afterwards).

Each user sees only the jobs they may read (:mod:`statecore_airflow.ui.access`): the auth
manager must let them read a DAG that ran the job (or every DAG); any other job is answered
as an unknown one, 404, by every page and API route, its lookups included.

Pages (HTML, :mod:`statecore_airflow.ui.pages`) and their JSON twins under ``api/`` read the
catalog of :class:`~statecore_airflow.hooks.StatecoreHook` (the connection ``statecore_default``,
else the environment) through :mod:`statecore.ops.overview`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import requires_access_view
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from statecore import errors
from statecore.ops import overview
from statecore_airflow.hooks import StatecoreHook
from statecore_airflow.ui import pages
from statecore_airflow.ui.access import JobAccess, job_access
from statecore_airflow.ui.runs import published_runs

if TYPE_CHECKING:
    from statecore.catalog import Catalog, CheckpointRecord
    from statecore.ops.overview import DagRunRef

__all__ = ["create_app"]

_NOT_FOUND = (errors.JobNotFoundError, errors.CheckpointNotFoundError)
_BAD_REQUEST = (errors.ConfigError, errors.KeyTypeError, errors.UnknownStateError)

Access = Annotated[JobAccess, Depends(job_access)]
"""The calling user's access, resolved once per request."""


@contextmanager
def _catalog() -> Iterator[Catalog]:
    with StatecoreHook().catalog() as catalog:
        yield catalog


def _base(request: Request) -> str:
    """The app's mount point, for the page's ``<base href>``: every link is relative to it."""
    return str(request.scope.get("root_path", "")).rstrip("/") + "/"


def _status(exc: errors.StateError) -> int:
    if isinstance(exc, _NOT_FOUND):
        return 404
    if isinstance(exc, _BAD_REQUEST):
        return 400
    return 500


def _linked_runs(
    access: JobAccess, job: str | None = None, **where: str
) -> tuple[list[dict[str, Any]], str | None]:
    """Runs of DAGs the user may read that published a checkpoint Asset, tied to their
    checkpoints, each with its ``outcome`` (:func:`_outcome`); a failure to read Airflow's
    database is shown on the page instead of failing it."""
    try:
        refs = [r for r in published_runs(job=job, **where) if access.may_read_dag(r.dag_id)]
    except Exception as exc:
        return [], f"could not read the DAG runs from Airflow's database: {exc}"
    jobs = {ref.job for ref in refs}
    with _catalog() as catalog:
        checkpoints = {j: catalog.list_checkpoints(j) for j in jobs if catalog.has_job(j)}
    rows = overview.link_runs(refs, checkpoints)
    for ref, row in zip(refs, rows):
        records = {c.checkpoint_id: c for c in checkpoints.get(ref.job, ())}
        row["outcome"] = _outcome(ref, records.get(row["checkpoint"]))
    return rows, None


def _outcome(run: DagRunRef, checkpoint: CheckpointRecord | None) -> str | None:
    """What ``run`` did to the checkpoint it is tied to: ``"no-op"`` when the checkpoint was
    complete before the run started (its id replayed, nothing changed), ``"completed"`` when it
    completed while the run ran, else ``None`` (no checkpoint, or no times to tell)."""
    done = None if checkpoint is None else checkpoint.completed_at
    if done is None or run.started_at is None:
        return None
    if done < run.started_at:
        return "no-op"
    return "completed" if run.ended_at is None or done <= run.ended_at else None


def _states(catalog: Catalog, jobs: list[str]) -> dict[str, list[str]]:
    """Each of ``jobs`` with the keyed states of its latest restorable checkpoint, by name: the
    lookup form's lists (a job without one has none)."""
    states: dict[str, list[str]] = {}
    for job in jobs:
        latest = catalog.latest_restorable(job)
        tables = () if latest is None else latest.tables
        states[job] = sorted({t.state for t in tables if t.table_kind == "keyed"})
    return states


def _lookup_values(request: Request) -> dict[str, str]:
    names = ("job", "state", "key", "user_key", "namespace", "point", "live")
    return {name: request.query_params.get(name, "") for name in names}


def _lookup(access: JobAccess, values: dict[str, str]) -> dict[str, Any]:
    if values["job"]:
        access.check(values["job"])
    return overview.lookup_row(
        StatecoreHook().get_config(),
        job=values["job"],
        state=values["state"],
        key=values["key"],
        user_key=values["user_key"] or None,
        namespace=values["namespace"] or None,
        point=values["point"] or None,
        live=values["live"] in ("on", "true", "1"),
    )


def create_app() -> FastAPI:
    """The app: pages at ``/``, ``/jobs/{job}``, ``/jobs/{job}/checkpoints/{id}``,
    ``/lookup``, ``/runs/{dag_id}/{run_id}`` and the same data as JSON under ``/api/``."""
    app = FastAPI(
        title="statecore",
        description="Jobs, checkpoints, savepoints and key lookups of the statecore catalog",
        dependencies=[Depends(requires_access_view(AccessView.WEBSITE))],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        wants_page = not request.url.path.startswith(_base(request) + "api/")
        accepts_html = "text/html" in request.headers.get("accept", "")
        if exc.status_code == 401 and wants_page and accepts_html:
            from airflow.api_fastapi.app import get_auth_manager

            login = get_auth_manager().get_url_login(next_url=str(request.url))
            return RedirectResponse(login, status_code=303)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

    @app.exception_handler(errors.StateError)
    async def _state_error(request: Request, exc: errors.StateError) -> Response:
        status = _status(exc)
        if request.url.path.startswith(_base(request) + "api/"):
            return JSONResponse({"detail": str(exc)}, status_code=status)
        return HTMLResponse(pages.error_page(_base(request), status, str(exc)), status)

    # --- JSON -------------------------------------------------------------------------------

    @app.get("/api/jobs")
    def api_jobs(access: Access) -> list[dict[str, Any]]:
        with _catalog() as catalog:
            return [j for j in overview.jobs_overview(catalog) if access.may_read(j["job"])]

    @app.get("/api/jobs/{job}/checkpoints")
    def api_checkpoints(access: Access, job: str) -> list[dict[str, Any]]:
        access.check(job)
        with _catalog() as catalog:
            return overview.checkpoints_overview(catalog, job)

    @app.get("/api/jobs/{job}/checkpoints/{checkpoint_id}")
    def api_checkpoint(access: Access, job: str, checkpoint_id: int) -> dict[str, Any]:
        access.check(job)
        with _catalog() as catalog:
            return overview.checkpoint_detail(catalog, job, checkpoint_id)

    @app.get("/api/jobs/{job}/pending-output")
    def api_pending_output(access: Access, job: str) -> list[dict[str, Any]]:
        access.check(job)
        with _catalog() as catalog:
            return overview.pending_outputs_overview(catalog, job)

    @app.get("/api/savepoints")
    def api_savepoints(access: Access, job: str | None = None) -> list[dict[str, Any]]:
        if job is not None:
            access.check(job)
        with _catalog() as catalog:
            rows = overview.savepoints_overview(catalog, job)
        return [s for s in rows if access.may_read(s["job"])]

    @app.get("/api/lookup")
    def api_lookup(request: Request, access: Access) -> dict[str, Any]:
        return _lookup(access, _lookup_values(request))

    @app.get("/api/runs")
    def api_runs(access: Access, job: str | None = None) -> dict[str, Any]:
        if job is not None:
            access.check(job)
        runs, error = _linked_runs(access, job)
        return {"runs": runs, "error": error}

    # --- pages ------------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, access: Access) -> HTMLResponse:
        with _catalog() as catalog:
            jobs = [j for j in overview.jobs_overview(catalog) if access.may_read(j["job"])]
            savepoints = [
                s for s in overview.savepoints_overview(catalog) if access.may_read(s["job"])
            ]
            states = _states(catalog, [str(j["job"]) for j in jobs])
        runs, error = _linked_runs(access)
        return HTMLResponse(
            pages.index_page(
                _base(request),
                jobs=jobs,
                savepoints=savepoints,
                runs=runs,
                states=states,
                runs_error=error,
            )
        )

    @app.get("/jobs/{job}", response_class=HTMLResponse)
    def job_page(request: Request, access: Access, job: str) -> HTMLResponse:
        access.check(job)
        with _catalog() as catalog:
            row = overview.job_overview(catalog, job)  # JobNotFoundError, naming the job
            checkpoints = overview.checkpoints_overview(catalog, job)
            savepoints = overview.savepoints_overview(catalog, job)
            pending = overview.pending_outputs_overview(catalog, job)
            states = _states(catalog, [job])[job]
        runs, _ = _linked_runs(access, job)
        return HTMLResponse(
            pages.job_page(
                _base(request),
                row,
                checkpoints=checkpoints,
                savepoints=savepoints,
                runs=runs,
                states=states,
                pending_outputs=pending,
            )
        )

    @app.get("/jobs/{job}/checkpoints/{checkpoint_id}", response_class=HTMLResponse)
    def checkpoint_page(
        request: Request, access: Access, job: str, checkpoint_id: int
    ) -> HTMLResponse:
        access.check(job)
        with _catalog() as catalog:
            detail = overview.checkpoint_detail(catalog, job, checkpoint_id)
        return HTMLResponse(pages.checkpoint_page(_base(request), detail))

    @app.get("/lookup", response_class=HTMLResponse)
    def lookup_page(request: Request, access: Access) -> HTMLResponse:
        values = _lookup_values(request)
        with _catalog() as catalog:
            jobs = sorted(j.name for j in catalog.list_jobs() if access.may_read(j.name))
            states = _states(catalog, jobs)
        result, error, status = None, None, 200
        try:
            result = _lookup(access, values)
        except errors.StateError as exc:
            error, status = str(exc), _status(exc)
        return HTMLResponse(
            pages.lookup_page(_base(request), states, values, result, error), status_code=status
        )

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, access: Access, dag_id: str, run_id: str) -> HTMLResponse:
        if not access.may_read_dag(dag_id):  # as for a job: not found, whether it exists or not
            message = f"DAG {dag_id!r} has no run {run_id!r}, or you may not read it"
            return HTMLResponse(pages.error_page(_base(request), 404, message), 404)
        runs, error = _linked_runs(access, dag_id=dag_id, run_id=run_id)
        if error is not None:
            return HTMLResponse(pages.error_page(_base(request), 500, error), 500)
        return HTMLResponse(pages.run_page(_base(request), dag_id, run_id, runs))

    return app
