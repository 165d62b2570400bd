"""Operators for savepoint, rescale, TTL cleanup and retention: declarative, logic in statecore.

Each takes keyword-only, templated arguments, does no I/O in ``__init__``, builds its hook in
``execute()`` and makes one library call; its result (JSON-able) is the task's XCom. Templated
numbers may arrive as text ("3", "" or "None" for unset); ``execute()`` turns them into values.
The library (never its command line) is imported in ``execute()``, so a DAG file parses without it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Context

from statecore_airflow.hooks import StatecoreHook

if TYPE_CHECKING:
    from statecore.config import StatecoreConfig

__all__ = [
    "LEASE_WAIT",
    "RescaleOperator",
    "RetentionOperator",
    "SavepointOperator",
    "TtlCleanupOperator",
]


def _optional_int(value: Any) -> int | None:
    if value is None or str(value).strip() in ("", "None", "null"):
        return None
    return int(value)


def _optional_str(value: Any) -> str | None:
    text = "" if value is None else str(value).strip()
    return None if text in ("", "None", "null") else text


def _paths(value: Any) -> list[str]:
    """Table paths as given: a list, or rendered from one (the JSON of ``| tojson``), or one
    path; none for an empty or unset value."""
    if isinstance(value, (list, tuple)):
        return [str(p) for p in value if str(p).strip()]
    text = _optional_str(value)
    if text is None:
        return []
    if text.startswith("["):
        return [str(p) for p in json.loads(text) if str(p).strip()]
    return [text]


def _flag(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


LEASE_WAIT = timedelta(minutes=10)
"""How long a statecore operator waits, by default, for the job's lease when a run of the job
(or another operation) holds it: a maintenance task scheduled beside the job's runs waits for
the run in progress instead of failing."""


class _StatecoreOperator(BaseOperator):
    """What every statecore operator has: the job, the connection naming the catalog, and how
    long it waits for the job's lease (``lease_wait``, :data:`LEASE_WAIT`; 0: refused at once
    while another writer holds the job)."""

    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        job: str,
        statecore_conn_id: str = StatecoreHook.default_conn_name,
        lease_wait: timedelta = LEASE_WAIT,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.statecore_conn_id = statecore_conn_id
        self.lease_wait = lease_wait

    def _hook(self) -> StatecoreHook:
        return StatecoreHook(self.statecore_conn_id)

    def _config(self, hook: StatecoreHook) -> StatecoreConfig:
        """The hook's configuration, waiting ``lease_wait`` for the job's lease."""
        return replace(hook.get_config(), lease_wait=self.lease_wait)


class SavepointOperator(_StatecoreOperator):
    """Pin ``job``'s latest checkpoint as a savepoint, or with ``export`` copy it into a
    self-contained folder below ``target`` (``statecore savepoint [--export]``).

    XCom: ``{"job", "name", "kind", "path", "checkpoint_id", "rows", "bytes"}``; ``kind`` is
    ``"pin"`` (``path`` ``None``) or ``"export"`` (``path`` its folder).
    """

    template_fields: Sequence[str] = ("job", "name", "target", "export")

    def __init__(
        self,
        *,
        job: str,
        name: str | None = None,
        target: str | None = None,
        export: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(job=job, **kwargs)
        self.name = name
        self.target = target
        self.export = export

    def execute(self, context: Context) -> dict[str, Any]:
        from statecore.errors import ConfigError
        from statecore.ops.savepoint import pin_savepoint, take_savepoint

        export, target = _flag(self.export), _optional_str(self.target)
        if target is not None and not export:
            raise ConfigError(
                f"savepoint of job {self.job!r}: target {target} is an export's folder; a pin "
                "has none: set export to copy the state there"
            )
        hook = self._hook()
        config = self._config(hook)
        with hook.catalog() as catalog:
            if export:
                point = take_savepoint(
                    config,
                    catalog,
                    self.job,
                    name=_optional_str(self.name),
                    target=target,
                    progress=self.log.info,
                )
            else:
                point = pin_savepoint(
                    config, catalog, self.job, name=_optional_str(self.name), progress=self.log.info
                )
        return {
            "job": point.job,
            "name": point.name,
            "kind": "export" if export else "pin",
            "path": point.savepoint,
            "checkpoint_id": point.checkpoint_id,
            "rows": point.total_rows,
            "bytes": point.total_bytes,
        }


class RescaleOperator(_StatecoreOperator):
    """Rescale ``job`` to ``parallelism`` (past its max parallelism with ``max_parallelism``),
    as ``statecore rescale``; ``savepoint`` is one (name or folder) taken just before, if any.

    XCom: the :class:`~statecore.ops.rescale.RescaleResult` as a dict.
    """

    template_fields: Sequence[str] = ("job", "parallelism", "max_parallelism", "savepoint")

    def __init__(
        self,
        *,
        job: str,
        parallelism: int | str,
        max_parallelism: int | str | None = None,
        savepoint: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(job=job, **kwargs)
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.savepoint = savepoint

    def execute(self, context: Context) -> dict[str, Any]:
        from statecore.ops.rescale import rescale

        hook = self._hook()
        config = self._config(hook)
        with hook.catalog() as catalog:
            result = rescale(
                config,
                catalog,
                self.job,
                parallelism=int(self.parallelism),
                max_parallelism=_optional_int(self.max_parallelism),
                savepoint=_optional_str(self.savepoint),
                progress=self.log.info,
            )
        return result.to_dict()


class TtlCleanupOperator(_StatecoreOperator):
    """Remove the expired TTL state of ``job`` as a maintenance checkpoint, compact, VACUUM
    (``statecore ttl-cleanup``); logs the per state and key group report as a table.

    XCom: the report (``expired``, ``rows_reclaimed``, ``bytes_reclaimed``, ``key_groups``, ...).
    """

    template_fields: Sequence[str] = ("job", "vacuum_retention_hours", "dry_run")

    def __init__(
        self,
        *,
        job: str,
        vacuum_retention_hours: float | str | None = 168,
        dry_run: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(job=job, **kwargs)
        self.vacuum_retention_hours = vacuum_retention_hours
        self.dry_run = dry_run

    def execute(self, context: Context) -> dict[str, Any]:
        from statecore.ops.ttl_cleanup import ttl_cleanup

        hook = self._hook()
        config = self._config(hook)
        hours = _optional_str(self.vacuum_retention_hours)
        with hook.catalog() as catalog:
            report = ttl_cleanup(
                config,
                catalog,
                self.job,
                dry_run=_flag(self.dry_run),
                progress=self.log.info,
                vacuum_after=None if hours is None else timedelta(hours=float(hours)),
            )
        for row in report.rows():
            self.log.info(
                "%s/%s key group %s: %s expired, %s rows and %s bytes reclaimed",
                row["operator"],
                row["state"],
                row["key_group"],
                row["expired"],
                row["rows_reclaimed"],
                row["bytes_reclaimed"],
            )
        self.log.info(
            "TTL cleanup of %s: %s expired, %s rows and %s bytes reclaimed in %s key groups",
            self.job,
            report.expired,
            report.rows_reclaimed,
            report.bytes_reclaimed,
            len(report.key_groups),
        )
        return report.to_dict()


class RetentionOperator(_StatecoreOperator):
    """Commit the pending output of ``job``'s completed checkpoints (a commit that failed, or a
    driver that died after the completion), then keep the last ``retain`` checkpoints, expire
    the rest, VACUUM and cut the Delta logs (``statecore retention``); no VACUUM when
    ``vacuum_retention_hours`` is empty (``None``). ``log_grace_seconds``: log entries younger
    than this stay (empty: the library's ``LOG_GRACE``); ``outputs``: the job's output and
    late-data tables, whose logs are cut too (a list, its JSON, or one path). The task log names
    each pending output (checkpoint, table, since when, why) and what was committed; an output
    that cannot be committed fails the task, naming the checkpoint and the files missing.

    XCom: ``{"retained", "expired", "rolled_forward", "files_deleted", "log_files_deleted", ...}``.
    """

    template_fields: Sequence[str] = (
        "job",
        "retain",
        "vacuum_retention_hours",
        "log_grace_seconds",
        "outputs",
        "dry_run",
    )

    def __init__(
        self,
        *,
        job: str,
        retain: int | str,
        vacuum_retention_hours: float | str | None = 168,
        log_grace_seconds: float | str | None = None,
        outputs: Sequence[str] | str | None = None,
        dry_run: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(job=job, **kwargs)
        self.retain = retain
        self.vacuum_retention_hours = vacuum_retention_hours
        self.log_grace_seconds = log_grace_seconds
        self.outputs = outputs
        self.dry_run = dry_run

    def execute(self, context: Context) -> dict[str, Any]:
        from statecore.ops.retention import apply_retention
        from statecore.snapshot.log import LOG_GRACE

        hook = self._hook()
        config = self._config(hook)
        hours = _optional_str(self.vacuum_retention_hours)
        grace = _optional_str(self.log_grace_seconds)
        with hook.catalog() as catalog:
            report = apply_retention(
                config,
                catalog,
                self.job,
                retain=int(self.retain),
                dry_run=_flag(self.dry_run),
                vacuum_after=None if hours is None else timedelta(hours=float(hours)),
                log_grace=LOG_GRACE if grace is None else timedelta(seconds=float(grace)),
                outputs=_paths(self.outputs),
                progress=self.log.info,
            )
        return report.to_dict()
