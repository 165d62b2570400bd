"""Restore points: a completed checkpoint or a savepoint, the complete state of a job at one time.

Every operation that reads a job's state (savepoint, rescale, diff, check, SQL, repair) takes a
:class:`RestorePoint`, so it works the same on a checkpoint in the catalog and on a savepoint
folder. An exported savepoint is described by its metadata file ``_savepoint.json``, whose table
paths are relative to the savepoint's folder: the folder can be moved or copied anywhere, and
restores with an empty catalog. A pinned savepoint is the same description, kept in the catalog
with the paths of the job's own tables (:func:`pin_point`, :func:`pinned_tables`). Either also
keeps what its source checkpoint processed (``source_input``: for a stream's micro-batch, the
source offsets a new query starts from).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import pyarrow as pa

from statecore.catalog import (
    Catalog,
    CheckpointRecord,
    CheckpointStatus,
    SavepointRecord,
    StateRecord,
    TableVersion,
)
from statecore.config import check_name
from statecore.errors import CheckpointNotFoundError, ConfigError, CorruptSnapshotError
from statecore.snapshot import TIMERS
from statecore.snapshot.files import table_filesystem
from statecore.types import schema_from_text

__all__ = [
    "METADATA_FILE",
    "SAVEPOINT_FORMAT",
    "RestorePoint",
    "checkpoint_point",
    "is_savepoint_name",
    "load_savepoint",
    "pin_point",
    "pinned_tables",
    "resolve_point",
    "savepoint_point",
    "table_location",
    "tables_by_name",
]

METADATA_FILE = "_savepoint.json"
SAVEPOINT_FORMAT = 1


def table_location(operator: str, table_kind: str, state: str) -> str:
    """Where a table lives below a job's folder: ``<operator>/<kind>/<state>`` (the timers:
    ``<operator>/timers``), as in the warehouse (:func:`statecore.snapshot.state_table_uri`)."""
    return f"{operator}/{TIMERS}" if table_kind == TIMERS else f"{operator}/{table_kind}/{state}"


@dataclass(frozen=True, kw_only=True)
class RestorePoint:
    """The tables and registered states of one job at a completed checkpoint or a savepoint.

    ``checkpoint_id`` is the checkpoint (for a savepoint: the checkpoint it was taken from, if
    any); ``savepoint`` is an exported savepoint's folder, ``None`` for a checkpoint or a pinned
    savepoint (``pinned``: its tables are versions of the job's own tables).
    """

    job: str
    checkpoint_id: int | None
    savepoint: str | None
    name: str
    parallelism: int
    max_parallelism: int
    tables: tuple[TableVersion, ...]
    states: tuple[StateRecord, ...]
    created_at: datetime | None = None
    reason: str | None = None
    watermark: int | None = None
    """The event-time watermark (epoch ms) of the state; ``None``: none known."""
    input_identity: str | None = None
    """What the source checkpoint processed (``CheckpointRecord.input_identity``: a stream's
    micro-batch id and source offsets, where a new query continues from); ``None``: unknown."""
    pinned: bool = False

    @property
    def label(self) -> str:
        """For messages: ``checkpoint 3 of job 'clicks'`` or ``savepoint 'sp' of job 'clicks'``."""
        if self.pinned:
            return (
                f"pinned savepoint {self.name!r} of job {self.job!r} (checkpoint "
                f"{self.checkpoint_id})"
            )
        if self.savepoint is None:
            return f"checkpoint {self.checkpoint_id} of job {self.job!r}"
        return f"savepoint {self.name!r} of job {self.job!r} ({self.savepoint})"

    @property
    def total_rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.tables)

    @property
    def operators(self) -> list[str]:
        return sorted({t.operator for t in self.tables} | {s.operator for s in self.states})

    def state(self, table: TableVersion) -> StateRecord | None:
        """The registered state a table holds, if the catalog or the metadata names it."""
        for state in self.states:
            if state.operator == table.operator and state.name == table.state:
                return state
        return None

    def rows_schema(self, table: TableVersion) -> pa.Schema | None:
        """The schema of the table's rows as the state registered it (``None`` if unknown)."""
        state = self.state(table)
        return None if state is None else schema_from_text(state.schema)

    # -- the metadata file -----------------------------------------------------------------
    def to_metadata(self) -> dict[str, Any]:
        """The savepoint metadata: table paths relative to ``self.savepoint`` (as they are
        without one: a pin's)."""
        root = None if self.savepoint is None else self.savepoint.rstrip("/") + "/"
        return {
            "format": "statecore-savepoint",
            "format_version": SAVEPOINT_FORMAT,
            "name": self.name,
            "job": self.job,
            "reason": self.reason,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "source_checkpoint": self.checkpoint_id,
            "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism,
            "watermark": self.watermark,
            "source_input": self.input_identity,
            "operators": self.operators,
            "states": [
                {
                    "operator": s.operator,
                    "name": s.name,
                    "kind": s.kind,
                    "descriptor": s.descriptor,
                    "schema": s.schema,
                    "ttl": s.ttl,
                }
                for s in self.states
            ],
            "tables": [
                {
                    "operator": t.operator,
                    "state": t.state,
                    "table_kind": t.table_kind,
                    "path": t.path if root is None else t.path.removeprefix(root),
                    "version": t.version,
                    "rows": t.rows,
                    "bytes": t.bytes,
                    "key_groups": {str(k): [r, b] for k, (r, b) in sorted(t.key_groups.items())},
                }
                for t in self.tables
            ],
        }

    @classmethod
    def from_metadata(cls, data: dict[str, Any], folder: str | None) -> RestorePoint:
        """A savepoint at ``folder`` from its metadata (``None``: a pin, whose table paths are
        the job's own tables')."""
        root = None if folder is None else folder.rstrip("/")
        job = check_name("job", str(data["job"]))
        for t in data["tables"]:
            check_name("operator", t["operator"])
            segments = str(t["path"]).split("/")
            if root is None:
                continue
            if t["path"].startswith("/") or {"", ".", ".."} & set(segments):
                raise ConfigError(
                    f"table path {t['path']!r} of state {t['state']!r} must lie inside the "
                    "savepoint folder"
                )
        created = data.get("created_at")
        return cls(
            job=job,
            checkpoint_id=data.get("source_checkpoint"),
            savepoint=root,
            name=str(data["name"]),
            parallelism=int(data["parallelism"]),
            max_parallelism=int(data["max_parallelism"]),
            reason=data.get("reason"),
            created_at=datetime.fromisoformat(created) if created else None,
            watermark=None if data.get("watermark") is None else int(data["watermark"]),
            input_identity=data.get("source_input"),
            pinned=root is None,
            states=tuple(
                StateRecord(
                    job=job,
                    operator=s["operator"],
                    name=s["name"],
                    kind=s["kind"],
                    descriptor=s["descriptor"],
                    schema=s["schema"],
                    ttl=s.get("ttl"),
                )
                for s in data["states"]
            ),
            tables=tuple(
                TableVersion(
                    operator=t["operator"],
                    state=t["state"],
                    table_kind=t["table_kind"],
                    path=t["path"] if root is None else f"{root}/{t['path']}",
                    version=int(t["version"]),
                    rows=int(t["rows"]),
                    bytes=int(t["bytes"]),
                    key_groups={int(k): (int(r), int(b)) for k, (r, b) in t["key_groups"].items()},
                )
                for t in data["tables"]
            ),
        )

    def for_job(self, job: str) -> RestorePoint:
        """The same state, as the state of job ``job``."""
        return replace(self, job=job, states=tuple(replace(s, job=job) for s in self.states))


def load_savepoint(path: str) -> RestorePoint:
    """The savepoint in folder ``path``, from its metadata file alone (no catalog needed)."""
    folder = path.rstrip("/")
    fs, root = table_filesystem(folder)
    try:
        with fs.open_input_stream(f"{root}/{METADATA_FILE}") as stream:
            data = json.loads(stream.read())
    except FileNotFoundError as exc:
        raise CheckpointNotFoundError(
            f"{folder} is not a savepoint: it has no {METADATA_FILE} (a savepoint whose writing "
            "failed has none either)"
        ) from exc
    except (OSError, ValueError) as exc:
        raise CorruptSnapshotError(f"savepoint metadata {folder}/{METADATA_FILE}: {exc}") from exc
    if (
        data.get("format") != "statecore-savepoint"
        or int(data.get("format_version", 0)) > SAVEPOINT_FORMAT
    ):
        raise CorruptSnapshotError(
            f"{folder}/{METADATA_FILE} is not a savepoint this statecore reads (format "
            f"{data.get('format')!r} version {data.get('format_version')!r})"
        )
    try:
        return RestorePoint.from_metadata(data, folder)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptSnapshotError(f"savepoint metadata {folder}/{METADATA_FILE}: {exc}") from exc


def checkpoint_point(catalog: Catalog, job: str, checkpoint_id: int | None = None) -> RestorePoint:
    """A completed checkpoint of ``job`` (the latest when ``checkpoint_id`` is ``None``)."""
    record: CheckpointRecord | None
    if checkpoint_id is None:
        record = catalog.latest_checkpoint(job)
        if record is None:
            raise CheckpointNotFoundError(f"job {job!r} has no completed checkpoint yet")
    else:
        record = catalog.get_checkpoint(job, checkpoint_id)
        if record.status is not CheckpointStatus.COMPLETED:
            raise CheckpointNotFoundError(
                f"checkpoint {checkpoint_id} of job {job!r} is {record.status.name}, not a "
                "completed checkpoint"
            )
    return RestorePoint(
        job=job,
        checkpoint_id=record.checkpoint_id,
        savepoint=None,
        name=f"checkpoint {record.checkpoint_id}",
        parallelism=record.parallelism,
        max_parallelism=record.max_parallelism,
        tables=record.tables,
        states=tuple(catalog.list_states(job)),
        created_at=record.completed_at,
        reason=record.kind.name.lower(),
        watermark=record.watermark,
        input_identity=record.input_identity,
    )


def pin_point(record: SavepointRecord) -> RestorePoint:
    """The state a savepoint record keeps: a pin's from its description in the catalog, an
    export's from its folder."""
    if record.pin is None:
        return load_savepoint(record.path)
    try:
        return RestorePoint.from_metadata(record.pin, None)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptSnapshotError(
            f"pinned savepoint {record.name!r} of job {record.job!r}: its description in the "
            f"catalog is unreadable: {exc}"
        ) from exc


def is_savepoint_name(ref: str) -> bool:
    """A name in the catalog, not a folder."""
    return "/" not in ref and "\\" not in ref


def savepoint_point(catalog: Catalog, job: str, ref: str) -> RestorePoint:
    """Savepoint ``ref`` of ``job``: a name in the catalog (a pin or an export), or a folder."""
    if is_savepoint_name(ref):
        return pin_point(catalog.get_savepoint(job, ref))
    return load_savepoint(ref)


def pinned_tables(catalog: Catalog, job: str) -> list[TableVersion]:
    """The table versions the pinned savepoints of ``job`` keep: retention, log cleanup and
    VACUUM keep what they need."""
    if not catalog.has_job(job):
        return []
    return [
        table
        for record in catalog.list_savepoints(job)
        if record.pin is not None
        for table in pin_point(record).tables
    ]


def resolve_point(catalog: Catalog, job: str, ref: str | int | None = None) -> RestorePoint:
    """What ``ref`` names for ``job``: ``None`` the latest checkpoint, a number a checkpoint id,
    else a savepoint name in the catalog (a pin or an export) or a savepoint folder."""
    if ref is None:
        return checkpoint_point(catalog, job)
    if isinstance(ref, int) or ref.isdigit():
        return checkpoint_point(catalog, job, int(ref))
    return savepoint_point(catalog, job, ref)


def tables_by_name(point: RestorePoint) -> dict[tuple[str, str, str], TableVersion]:
    """The point's tables by ``(operator, table_kind, state)``."""
    return {(t.operator, t.table_kind, t.state): t for t in point.tables}
