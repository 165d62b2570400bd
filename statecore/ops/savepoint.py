"""Savepoints: pins on a job's checkpoints, exports (self-contained, relocatable copies of its
state), and restoring from them.

A **pin** (:func:`pin_savepoint`, ``statecore savepoint JOB``) is a savepoint that copies
nothing: the catalog keeps the table versions of a completed checkpoint under the savepoint's
name, with its states, watermark and source input, and retention, Delta log cleanup and VACUUM
keep every file and log entry those versions need
(:func:`~statecore.checkpoint.points.pinned_tables`) until the pin is deleted
(:func:`delete_savepoint`). Taking one costs one catalog row, whatever the state's size.
Restoring it into its own job commits, in each table, the pinned version's files again (Delta's
RESTORE: no byte copied); at another parallelism the next run restores the new key-group ranges,
as after any rescale within the max parallelism.

An **export** (:func:`take_savepoint`, ``statecore savepoint JOB --export``) is a folder (by default
``<warehouse>/_savepoints/<job>/<name>``) holding its own Delta tables, laid out as in the warehouse
(``<operator>/keyed/<state>``, ``<operator>/operator/<state>``, ``<operator>/timers``), and
``_savepoint.json``: job, operators, state descriptors and schemas, parallelism, max parallelism,
the checkpoint it was taken from, its event-time watermark (a stream restored from it starts there)
and what that checkpoint processed (a stream's source offsets:
:func:`statecore.spark.offsets.savepoint_offsets`). The metadata file is written last, so a folder
without one is not a savepoint. Files are copied, never shared, so checkpoint retention and VACUUM
cannot touch an export. Its files are copied many at a time
(:func:`~statecore.snapshot.copies.copy_files`): server-side when the warehouse and the export
are on S3 (``CopyObject``, ``UploadPartCopy`` above 5 GB; no byte through this process), each
checked first against the size the Delta log gives it. A copy that fails removes the folder
and records nothing.

:func:`write_savepoint` also derives savepoints from a restore point with some tables rewritten
(rescale past the max parallelism, repair); :func:`import_point` makes a restore point the job's
latest checkpoint, as a MAINTENANCE checkpoint in the job's own tables, so the job continues
incrementally from it; :func:`restore_savepoint` does that for a savepoint (a name in the catalog,
or an export's folder, with an empty catalog if need be). Both refuse
(:class:`~statecore.errors.RestoreWouldDiscardError`, naming them) to discard checkpoints the job
completed after the point's source checkpoint, unless forced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.fs as pafs

from statecore.catalog import (
    Catalog,
    CheckpointRecord,
    CheckpointStatus,
    SavepointRecord,
    TableVersion,
)
from statecore.checkpoint.lock import JobLease, commit_maintenance_checkpoint, maintenance_lock
from statecore.checkpoint.points import (
    METADATA_FILE,
    RestorePoint,
    checkpoint_point,
    is_savepoint_name,
    load_savepoint,
    savepoint_point,
    table_location,
)
from statecore.checkpoint.recover import check_catalog_not_behind, commit_metadata
from statecore.config import StatecoreConfig, check_name
from statecore.errors import ConfigError, JobNotFoundError, RestoreWouldDiscardError
from statecore.ops.pending import roll_forward_first
from statecore.progress import Progress, silent
from statecore.snapshot import Fence, state_table_uri
from statecore.snapshot.copies import copy_files
from statecore.snapshot.files import table_filesystem
from statecore.snapshot.rewrite import (
    TableLayout,
    commit_files,
    partition_sizes,
    restore_version,
    table_files,
    table_layout,
    write_partition_file,
)

__all__ = [
    "Rewrite",
    "TableRewriter",
    "check_restore",
    "delete_savepoint",
    "discarded_checkpoints",
    "import_point",
    "pin_savepoint",
    "record_pin",
    "register_savepoint_job",
    "restore_savepoint",
    "savepoint_folder",
    "take_savepoint",
    "write_savepoint",
]


@dataclass(frozen=True)
class Rewrite:
    """New contents for one table of a savepoint being written.

    ``parts`` yields ``(partition, rows)`` (a partition may come in several parts); the
    partitions in ``replaced`` lose their old files, every other partition is copied as it is.
    ``replaced=None`` replaces them all: the table is exactly ``parts``. ``layout`` is the new
    layout when the rows change schema.
    """

    parts: Iterable[tuple[int, pa.Table]]
    replaced: frozenset[int] | None
    layout: TableLayout | None = None


TableRewriter = Callable[[TableVersion, TableLayout], Rewrite | None]
"""Given a table of the source and its layout: how to rewrite it, or ``None`` to copy it."""


def savepoint_folder(config: StatecoreConfig, job: str, name: str, target: str | None) -> str:
    """``<target>/<name>``; the default target is ``<warehouse>/_savepoints/<job>``."""
    check_name("savepoint", name)
    check_name("job", job)
    base = target or f"{config.warehouse.rstrip('/')}/_savepoints/{job}"
    return f"{base.rstrip('/')}/{name}"


def _default_name(point: RestorePoint, reason: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")[:-3]
    source = point.checkpoint_id if point.checkpoint_id is not None else "sp"
    return f"{point.job}-{reason}-{source}-{stamp}"


def _copy_table(
    table: TableVersion,
    folder: str,
    rewrite: TableRewriter | None,
    *,
    app_id: str,
) -> TableVersion:
    layout = table_layout(table.path, table.version)
    plan = rewrite(table, layout) if rewrite is not None else None
    target = f"{folder}/{table_location(table.operator, table.table_kind, table.state)}"
    files = table_files(table.path, table.version)
    new_layout = layout
    if plan is None:
        written = copy_files(table.path, target, layout, files, prefix="sp", version=table.version)
    else:
        new_layout = plan.layout or layout
        kept = (
            [] if plan.replaced is None else [f for f in files if f.key_group not in plan.replaced]
        )
        written = copy_files(
            table.path, target, new_layout, kept, prefix="sp", version=table.version
        )
        written += [
            write_partition_file(target, new_layout, part, rows, prefix="sp")
            for part, rows in plan.parts
            if rows.num_rows
        ]
    version = commit_files(
        target,
        new_layout,
        written,
        replaced=None,
        base_version=None,
        app_id=app_id,
        checkpoint_id=0,
    )
    sizes = partition_sizes(target, version)
    return replace(
        table,
        path=target,
        version=version,
        key_groups=sizes,
        rows=sum(r for r, _ in sizes.values()),
        bytes=sum(b for _, b in sizes.values()),
    )


def _savepoints(catalog: Catalog, job: str) -> list[SavepointRecord]:
    try:
        return catalog.list_savepoints(job)
    except JobNotFoundError:
        return []


def write_savepoint(
    catalog: Catalog | None,
    config: StatecoreConfig,
    point: RestorePoint,
    *,
    reason: str,
    name: str | None = None,
    target: str | None = None,
    rewrite: TableRewriter | None = None,
    max_parallelism: int | None = None,
    progress: Progress = silent,
) -> RestorePoint:
    """Write ``point`` (with tables rewritten by ``rewrite``) as a new savepoint; record it in
    ``catalog`` when the catalog knows the job. No lock is taken: callers hold the job's."""
    name = name or _default_name(point, reason)
    folder = savepoint_folder(config, point.job, name, target)
    fs, root = table_filesystem(folder)
    if fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        raise ConfigError(f"savepoint folder {folder} exists already and is not empty")
    if catalog is not None and any(s.name == name for s in _savepoints(catalog, point.job)):
        raise ConfigError(f"job {point.job!r} already has a savepoint named {name!r}")
    tables = []
    try:
        for i, table in enumerate(point.tables, 1):
            progress(
                f"savepoint {name}: table {i}/{len(point.tables)} {table.operator}/"
                f"{table.table_kind}/{table.state} ({table.rows} rows, {table.bytes} bytes)"
            )
            tables.append(
                _copy_table(table, folder, rewrite, app_id=f"{point.job}/savepoint/{name}")
            )
        saved = replace(
            point,
            savepoint=folder,
            name=name,
            tables=tuple(tables),
            reason=reason,
            created_at=datetime.now(UTC),
            max_parallelism=max_parallelism or point.max_parallelism,
        )
        with fs.open_output_stream(f"{root}/{METADATA_FILE}.tmp") as out:
            out.write(json.dumps(saved.to_metadata(), indent=2).encode())
        fs.move(f"{root}/{METADATA_FILE}.tmp", f"{root}/{METADATA_FILE}")
    except BaseException:
        if fs.get_file_info(root).type == pafs.FileType.Directory:
            fs.delete_dir(root)  # no partial savepoint is left behind
        raise
    if catalog is not None:
        try:
            catalog.add_savepoint(
                SavepointRecord(
                    job=point.job,
                    name=name,
                    path=folder,
                    reason=reason,
                    source_checkpoint=saved.checkpoint_id,
                    parallelism=saved.parallelism,
                    max_parallelism=saved.max_parallelism,
                    rows=saved.total_rows,
                    bytes=saved.total_bytes,
                    created_at=saved.created_at or datetime.now(UTC),
                )
            )
        except JobNotFoundError:
            progress(f"savepoint {name}: job {point.job!r} is not in this catalog; not recorded")
    progress(f"savepoint {name}: {saved.total_rows} rows, {saved.total_bytes} bytes in {folder}")
    return saved


def record_pin(
    catalog: Catalog,
    config: StatecoreConfig,
    point: RestorePoint,
    *,
    reason: str,
    name: str | None = None,
    progress: Progress = silent,
) -> RestorePoint:
    """Record ``point`` (a completed checkpoint of its job) as a pinned savepoint: one catalog
    row, no file written. No lock is taken: callers hold the job's."""
    if point.savepoint is not None or point.pinned or point.checkpoint_id is None:
        raise ConfigError(f"{point.label} is not a completed checkpoint: only those are pinned")
    name = name or _default_name(point, reason)
    check_name("savepoint", name)
    pinned = replace(point, name=name, reason=reason, pinned=True, created_at=datetime.now(UTC))
    catalog.add_savepoint(
        SavepointRecord(
            job=point.job,
            name=name,
            path=f"{config.warehouse.rstrip('/')}/{point.job}",
            reason=reason,
            source_checkpoint=point.checkpoint_id,
            parallelism=point.parallelism,
            max_parallelism=point.max_parallelism,
            rows=point.total_rows,
            bytes=point.total_bytes,
            created_at=pinned.created_at or datetime.now(UTC),
            pin=pinned.to_metadata(),
        )
    )
    progress(
        f"savepoint {name}: pinned checkpoint {point.checkpoint_id} of job {point.job!r} "
        f"({point.total_rows} rows, {point.total_bytes} bytes, nothing copied)"
    )
    return pinned


def pin_savepoint(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    *,
    name: str | None = None,
    checkpoint_id: int | None = None,
    progress: Progress = silent,
) -> RestorePoint:
    """Pin the latest (or the given) completed checkpoint of ``job`` as savepoint ``name``: the
    catalog keeps its table versions, retention and VACUUM keep their files, nothing is copied.
    :class:`~statecore.errors.CheckpointNotFoundError` for a checkpoint that did not complete,
    :class:`ConfigError` for a name the job's savepoints have already."""
    catalog.get_job(job)  # JobNotFoundError names the known jobs
    with maintenance_lock(catalog, job, "savepoint", wait=config.lease_wait):
        point = checkpoint_point(catalog, job, checkpoint_id)
        return record_pin(catalog, config, point, reason="manual", name=name, progress=progress)


def delete_savepoint(
    catalog: Catalog, job: str, name: str, *, progress: Progress = silent
) -> SavepointRecord:
    """Forget savepoint ``name`` of ``job``: a pin releases its table versions (the next
    retention and VACUUM may reclaim them); an export's folder stays where it is (restorable by
    its path) and is for its owner to remove. The record it was."""
    record = catalog.delete_savepoint(job, name)
    if record.pin is None:
        progress(f"savepoint {name}: forgotten; its folder {record.path} was left as it is")
    else:
        progress(f"savepoint {name}: pin on checkpoint {record.source_checkpoint} released")
    return record


def take_savepoint(
    config: StatecoreConfig,
    catalog: Catalog,
    job: str,
    *,
    name: str | None = None,
    target: str | None = None,
    checkpoint_id: int | None = None,
    progress: Progress = silent,
) -> RestorePoint:
    """Export the latest (or the given) completed checkpoint of ``job``: copy it into a new,
    self-contained savepoint folder (``statecore savepoint JOB --export``)."""
    catalog.get_job(job)  # JobNotFoundError names the known jobs
    with maintenance_lock(catalog, job, "savepoint", wait=config.lease_wait) as lease:
        roll_forward_first(
            "savepoint", catalog, job, lease.fence, warehouse=config.warehouse, progress=progress
        )
        point = checkpoint_point(catalog, job, checkpoint_id)
        return write_savepoint(
            catalog, config, point, reason="manual", name=name, target=target, progress=progress
        )


def discarded_checkpoints(catalog: Catalog, point: RestorePoint) -> list[CheckpointRecord]:
    """The completed checkpoints of ``point.job`` that restoring ``point`` would discard: those
    completed after the point's source checkpoint (every one, when the job's catalog does not
    know that source)."""
    completed = catalog.list_checkpoints(point.job, status=CheckpointStatus.COMPLETED)
    source = None
    if point.checkpoint_id is not None and catalog.checkpoint_status(
        point.job, point.checkpoint_id
    ) in (CheckpointStatus.COMPLETED, CheckpointStatus.EXPIRED):
        source = catalog.get_checkpoint(point.job, point.checkpoint_id)
    after = [
        c
        for c in completed
        if source is None
        or source.completed_at is None
        or (c.completed_at is not None and c.completed_at > source.completed_at)
    ]
    return sorted(after, key=lambda c: (c.completed_at is None, c.completed_at, c.checkpoint_id))


def check_restore(
    config: StatecoreConfig, catalog: Catalog, point: RestorePoint, *, force: bool = False
) -> list[CheckpointRecord]:
    """The checks of restoring ``point`` into ``point.job``, before anything changes: the
    checkpoints the restore would discard (:func:`discarded_checkpoints`; none for a job the
    catalog does not know), :class:`RestoreWouldDiscardError` if there are any and
    :class:`~statecore.errors.CatalogBehindWarehouseError` if the job's tables hold checkpoints
    the catalog does not know, unless ``force``."""
    job = point.job
    if not force:
        check_catalog_not_behind(config, catalog, job)
    discarded = discarded_checkpoints(catalog, point) if catalog.has_job(job) else []
    if discarded and not force:
        ids = ", ".join(str(c.checkpoint_id) for c in discarded)
        source = (
            "an unknown checkpoint"
            if point.checkpoint_id is None
            else (f"checkpoint {point.checkpoint_id}")
        )
        raise RestoreWouldDiscardError(
            f"job {job!r}: restoring {point.label} (taken from {source}) would discard "
            f"checkpoint(s) {ids}, completed since; restore with force=True (`--force`) to "
            "discard them"
        )
    return discarded


def import_point(
    config: StatecoreConfig,
    catalog: Catalog,
    point: RestorePoint,
    *,
    lease: JobLease,
    parallelism: int | None = None,
    force: bool = False,
    progress: Progress = silent,
) -> CheckpointRecord:
    """Make ``point`` the latest checkpoint of ``point.job``: its tables are copied into the
    job's own tables (a table that is one of them already, as a pin's, gets its pinned
    version's files back without a copy: :func:`~statecore.snapshot.rewrite.restore_version`)
    and completed as a MAINTENANCE checkpoint, fenced by ``lease`` (the job's, which the
    caller holds: :func:`commit_maintenance_checkpoint`).

    The job is registered if the catalog does not know it; its parallelism becomes
    ``parallelism`` (default: the job's, else the point's) and its max parallelism the point's.
    :class:`RestoreWouldDiscardError` if the job completed checkpoints after the point's source
    (:func:`discarded_checkpoints`), :class:`~statecore.errors.CatalogBehindWarehouseError` if
    the job's tables hold checkpoints the catalog does not know, unless ``force``; then nothing
    changed.
    """
    job = point.job
    known = catalog.find_job(job)
    wanted = parallelism or (known.parallelism if known else point.parallelism)
    if known is None:
        catalog.ensure_job(job, parallelism=wanted, max_parallelism=point.max_parallelism)
    discarded = check_restore(config, catalog, point, force=force)
    if discarded:
        progress(f"restore {job}: discarding checkpoint(s) {[c.checkpoint_id for c in discarded]}")
    base = catalog.latest_checkpoint(job)

    def commit(checkpoint_id: int, fence: Fence) -> list[TableVersion]:
        tables = []
        for i, table in enumerate(point.tables, 1):
            progress(
                f"restore {job}: table {i}/{len(point.tables)} {table.operator}/"
                f"{table.table_kind}/{table.state}"
            )
            uri = state_table_uri(
                config.warehouse, job, table.operator, table.table_kind, table.state
            )
            if table.path.rstrip("/") == uri.rstrip("/"):  # a pin of the job: nothing copied
                version = restore_version(
                    uri,
                    table.version,
                    app_id=f"{job}/{table.operator}/{table.state}",
                    checkpoint_id=checkpoint_id,
                    metadata=commit_metadata(point, table, checkpoint_id),
                    fence=fence,
                )
                tables.append(replace(table, version=version))
                continue
            layout = table_layout(table.path, table.version)
            files = copy_files(
                table.path,
                uri,
                layout,
                table_files(table.path, table.version),
                prefix=f"cp-{checkpoint_id}",
                version=table.version,
            )
            version = commit_files(
                uri,
                layout,
                files,
                replaced=None,
                base_version=None,
                app_id=f"{job}/{table.operator}/{table.state}",
                checkpoint_id=checkpoint_id,
                metadata=commit_metadata(point, table, checkpoint_id),
                fence=fence,
            )
            tables.append(replace(table, path=uri, version=version))
        for operator in point.operators:
            states = [s for s in point.states if s.operator == operator]
            if states:
                catalog.register_states(job, operator, states)
        return tables

    record = commit_maintenance_checkpoint(
        catalog,
        job,
        lease=lease,
        base=base,
        parallelism=point.parallelism,
        max_parallelism=point.max_parallelism,
        commit=commit,
        watermark=point.watermark,
        input_identity=point.input_identity,
    )
    catalog.set_job_parallelism(
        job, parallelism=min(wanted, point.max_parallelism), max_parallelism=point.max_parallelism
    )
    progress(f"restore {job}: {point.label} is checkpoint {record.checkpoint_id}")
    return record


def register_savepoint_job(
    catalog: Catalog, path: str, *, job: str | None = None, parallelism: int | None = None
) -> RestorePoint:
    """The savepoint ``path`` (a folder, or a name among ``job``'s savepoints) as a restore
    point of ``job`` (default: the savepoint's job), with the job registered (with the
    savepoint's max parallelism) if the catalog does not know it: a writer can then take the
    job's lease to restore it."""
    if is_savepoint_name(path):
        if job is None:
            raise ConfigError(f"savepoint {path!r} is a name: give its job (--job) too")
        point = savepoint_point(catalog, job, path)
    else:
        point = load_savepoint(path)
    if job is not None and job != point.job:  # its source is another job's checkpoint
        point = replace(point.for_job(job), checkpoint_id=None)
    catalog.ensure_job(
        point.job,
        parallelism=parallelism or point.parallelism,
        max_parallelism=point.max_parallelism,
    )
    return point


def restore_savepoint(
    config: StatecoreConfig,
    catalog: Catalog,
    path: str,
    *,
    job: str | None = None,
    parallelism: int | None = None,
    force: bool = False,
    progress: Progress = silent,
    lease: JobLease | None = None,
) -> CheckpointRecord:
    """Restore ``job`` (default: the savepoint's job) from the savepoint ``path``: a name among
    the job's savepoints (a pin restores without copying) or an export's folder (which works
    with an empty catalog). The next run of the job continues from it. Refuses to discard the
    checkpoints the job completed after the savepoint's source checkpoint, unless ``force``.

    It holds the job's lease while it restores: its own, or ``lease``, one the caller holds on
    the job (a run restoring before it processes: no other writer comes in between)."""
    point = register_savepoint_job(catalog, path, job=job, parallelism=parallelism)
    if lease is None:
        with maintenance_lock(catalog, point.job, "restore", wait=config.lease_wait) as held:
            return import_point(
                config,
                catalog,
                point,
                lease=held,
                parallelism=parallelism,
                force=force,
                progress=progress,
            )
    if lease.job != point.job:
        raise ConfigError(
            f"restoring {path} into job {point.job!r} needs that job's lease, not the lease "
            f"of job {lease.job!r}"
        )
    lease.check()
    return import_point(
        config, catalog, point, lease=lease, parallelism=parallelism, force=force, progress=progress
    )
