"""The catalog's tables, mapped for the ORM, and their conversion to records.

These mappings must describe the schema that :mod:`statecore.catalog.migrations` builds
(``tests/catalog`` checks that they agree). Nothing here leaves the package: the catalog converts
rows to the frozen records of :mod:`statecore.catalog.records`.
"""

from __future__ import annotations

import builtins
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, selectinload

from statecore.catalog.migrations import NAMING_CONVENTION
from statecore.catalog.records import (
    CheckpointKind,
    CheckpointRecord,
    CheckpointStatus,
    JobRecord,
    LiveEndpoint,
    MaintenanceLock,
    OutputOwner,
    PendingOutput,
    SavepointRecord,
    SkippedCheckpoint,
    StateRecord,
    TableVersion,
)
from statecore.catalog.sizes import decode_sizes, encode_sizes

__all__ = [
    "Base",
    "CheckpointRow",
    "CheckpointTableRow",
    "JobRow",
    "MaintenanceLockRow",
    "OutputOwnerRow",
    "PendingOutputRow",
    "SavepointRow",
    "SkippedCheckpointRow",
    "StateRow",
    "UTCDateTime",
    "WITH_SIZES",
]


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every database (SQLite stores no offset)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the catalog stores aware UTC times")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: sa.JSON()}  # noqa: RUF012


class JobRow(Base):
    __tablename__ = "statecore_jobs"

    id: Mapped[int] = mapped_column(_ID, primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    parallelism: Mapped[int]
    max_parallelism: Mapped[int]
    created_at: Mapped[datetime]
    last_completion_seq: Mapped[int] = mapped_column(sa.BigInteger)
    lease_epoch: Mapped[int] = mapped_column(sa.BigInteger, server_default="0")
    live_token: Mapped[str | None] = mapped_column(sa.String(64))

    def to_record(self) -> JobRecord:
        return JobRecord(
            name=self.name,
            parallelism=self.parallelism,
            max_parallelism=self.max_parallelism,
            created_at=self.created_at,
        )


class StateRow(Base):
    __tablename__ = "statecore_states"
    __table_args__ = (sa.UniqueConstraint("job_id", "operator", "name"),)

    id: Mapped[int] = mapped_column(_ID, primary_key=True)
    job_id: Mapped[int] = mapped_column(_ID, sa.ForeignKey("statecore_jobs.id"))
    operator: Mapped[str] = mapped_column(sa.String(200))
    name: Mapped[str] = mapped_column(sa.String(200))
    kind: Mapped[str] = mapped_column(sa.String(32))
    descriptor: Mapped[dict[str, Any]]
    schema: Mapped[str] = mapped_column(sa.Text)
    ttl: Mapped[dict[str, Any] | None]
    registered_at: Mapped[datetime]

    def to_record(self, job: str) -> StateRecord:
        return StateRecord(
            job=job,
            operator=self.operator,
            name=self.name,
            kind=self.kind,
            descriptor=dict(self.descriptor),
            schema=self.schema,
            ttl=None if self.ttl is None else dict(self.ttl),
        )


class CheckpointRow(Base):
    __tablename__ = "statecore_checkpoints"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "checkpoint_id"),
        sa.UniqueConstraint("job_id", "completion_seq"),
        sa.Index(None, "job_id", "status", "completion_seq"),
        sa.Index(None, "job_id", "kind", "status", "checkpoint_id"),
    )

    id: Mapped[int] = mapped_column(_ID, primary_key=True)
    job_id: Mapped[int] = mapped_column(_ID, sa.ForeignKey("statecore_jobs.id"))
    checkpoint_id: Mapped[int] = mapped_column(sa.BigInteger)
    kind: Mapped[str] = mapped_column(sa.String(16))
    status: Mapped[str] = mapped_column(sa.String(16))
    parallelism: Mapped[int]
    max_parallelism: Mapped[int]
    started_at: Mapped[datetime]
    completed_at: Mapped[datetime | None]
    completion_seq: Mapped[int | None] = mapped_column(sa.BigInteger)
    restored_from: Mapped[int | None] = mapped_column(sa.BigInteger)
    error: Mapped[str | None] = mapped_column(sa.Text)
    epoch: Mapped[int | None] = mapped_column(sa.BigInteger)
    input_identity: Mapped[str | None] = mapped_column(sa.Text)
    metrics: Mapped[dict[str, Any] | None]
    watermark: Mapped[int | None] = mapped_column(sa.BigInteger)

    tables: Mapped[list[CheckpointTableRow]] = relationship(
        order_by="CheckpointTableRow.id",
        cascade="all, delete-orphan",
        passive_deletes=True,
        lazy="selectin",
    )

    def to_record(self, job: str, *, with_sizes: bool = True) -> CheckpointRecord:
        """The checkpoint, its table versions without their key-group sizes unless
        ``with_sizes``."""
        return CheckpointRecord(
            job=job,
            checkpoint_id=self.checkpoint_id,
            kind=CheckpointKind[self.kind],
            status=CheckpointStatus[self.status],
            parallelism=self.parallelism,
            max_parallelism=self.max_parallelism,
            started_at=self.started_at,
            completed_at=self.completed_at,
            tables=tuple(table.to_record(with_sizes=with_sizes) for table in self.tables),
            restored_from=self.restored_from,
            error=self.error,
            input_identity=self.input_identity,
            metrics=self.metrics or {},
            watermark=self.watermark,
        )


class CheckpointTableRow(Base):
    __tablename__ = "statecore_checkpoint_tables"
    __table_args__ = (sa.UniqueConstraint("checkpoint_pk", "operator", "state", "table_kind"),)

    id: Mapped[int] = mapped_column(_ID, primary_key=True)
    checkpoint_pk: Mapped[int] = mapped_column(
        _ID, sa.ForeignKey("statecore_checkpoints.id", ondelete="CASCADE")
    )
    operator: Mapped[str] = mapped_column(sa.String(200))
    state: Mapped[str] = mapped_column(sa.String(200))
    table_kind: Mapped[str] = mapped_column(sa.String(16))
    path: Mapped[str] = mapped_column(sa.Text)
    version: Mapped[int] = mapped_column(sa.BigInteger)
    rows: Mapped[int] = mapped_column(sa.BigInteger)
    bytes: Mapped[int] = mapped_column(sa.BigInteger)
    sizes: Mapped[builtins.bytes | None] = mapped_column(sa.LargeBinary, deferred=True)

    @classmethod
    def from_record(cls, table: TableVersion) -> CheckpointTableRow:
        return cls(
            operator=table.operator,
            state=table.state,
            table_kind=table.table_kind,
            path=table.path,
            version=table.version,
            rows=table.rows,
            bytes=table.bytes,
            sizes=encode_sizes(table.key_groups),
        )

    def to_record(self, *, with_sizes: bool = True) -> TableVersion:
        """The table version, with its key groups' sizes if ``with_sizes`` (the column is
        deferred: a query with :data:`WITH_SIZES` loads it with the rows, else it is loaded
        here, one query per row)."""
        return TableVersion(
            operator=self.operator,
            state=self.state,
            table_kind=self.table_kind,
            path=self.path,
            version=self.version,
            rows=self.rows,
            bytes=self.bytes,
            key_groups=decode_sizes(self.sizes) if with_sizes and self.sizes is not None else {},
        )


WITH_SIZES = selectinload(CheckpointRow.tables).undefer(CheckpointTableRow.sizes)
"""The query option that loads a checkpoint's table versions with their key-group sizes."""


class SavepointRow(Base):
    __tablename__ = "statecore_savepoints"
    __table_args__ = (sa.UniqueConstraint("job_id", "name"),)

    id: Mapped[int] = mapped_column(_ID, primary_key=True)
    job_id: Mapped[int] = mapped_column(_ID, sa.ForeignKey("statecore_jobs.id"))
    name: Mapped[str] = mapped_column(sa.String(200))
    path: Mapped[str] = mapped_column(sa.Text)
    reason: Mapped[str] = mapped_column(sa.String(32))
    source_checkpoint: Mapped[int | None] = mapped_column(sa.BigInteger)
    parallelism: Mapped[int]
    max_parallelism: Mapped[int]
    rows: Mapped[int] = mapped_column(sa.BigInteger)
    bytes: Mapped[int] = mapped_column(sa.BigInteger)
    created_at: Mapped[datetime]
    pin: Mapped[dict[str, Any] | None]

    def to_record(self, job: str) -> SavepointRecord:
        return SavepointRecord(
            job=job,
            name=self.name,
            path=self.path,
            reason=self.reason,
            source_checkpoint=self.source_checkpoint,
            parallelism=self.parallelism,
            max_parallelism=self.max_parallelism,
            rows=self.rows,
            bytes=self.bytes,
            created_at=self.created_at,
            pin=self.pin,
        )


class MaintenanceLockRow(Base):
    __tablename__ = "statecore_maintenance_locks"

    job_id: Mapped[int] = mapped_column(
        _ID, sa.ForeignKey("statecore_jobs.id"), primary_key=True, autoincrement=False
    )
    operation: Mapped[str] = mapped_column(sa.String(64))
    owner: Mapped[str] = mapped_column(sa.String(200))
    acquired_at: Mapped[datetime]
    epoch: Mapped[int] = mapped_column(sa.BigInteger, server_default="0")
    expires_at: Mapped[datetime | None]

    def to_record(self, job: str) -> MaintenanceLock:
        return MaintenanceLock(
            job=job,
            operation=self.operation,
            owner=self.owner,
            acquired_at=self.acquired_at,
            epoch=self.epoch,
            expires_at=self.expires_at,
        )


class LiveEndpointRow(Base):
    __tablename__ = "statecore_live_endpoints"

    job_id: Mapped[int] = mapped_column(
        _ID, sa.ForeignKey("statecore_jobs.id"), primary_key=True, autoincrement=False
    )
    operator: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    subtask: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    key_group_start: Mapped[int]
    key_group_end: Mapped[int]
    address: Mapped[str] = mapped_column(sa.String(200))
    checkpoint_id: Mapped[int] = mapped_column(sa.BigInteger)
    updated_at: Mapped[datetime]

    def to_record(self, job: str) -> LiveEndpoint:
        return LiveEndpoint(
            job=job,
            operator=self.operator,
            subtask=self.subtask,
            key_group_start=self.key_group_start,
            key_group_end=self.key_group_end,
            address=self.address,
            checkpoint_id=self.checkpoint_id,
            updated_at=self.updated_at,
        )


class PendingOutputRow(Base):
    __tablename__ = "statecore_pending_outputs"
    __table_args__ = (sa.UniqueConstraint("job_id", "checkpoint_id", "uri"),)

    id: Mapped[int] = mapped_column(_ID, primary_key=True)
    job_id: Mapped[int] = mapped_column(_ID, sa.ForeignKey("statecore_jobs.id"))
    checkpoint_id: Mapped[int] = mapped_column(sa.BigInteger)
    uri: Mapped[str] = mapped_column(sa.String(1000))
    kind: Mapped[str] = mapped_column(sa.String(16))
    app_id: Mapped[str] = mapped_column(sa.String(500))
    table_schema: Mapped[str] = mapped_column(sa.Text)
    files: Mapped[list[dict[str, Any]]] = mapped_column(sa.JSON)
    epoch: Mapped[int | None] = mapped_column(sa.BigInteger)
    recorded_at: Mapped[datetime]
    committed_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(sa.Text)

    def to_record(self, job: str) -> PendingOutput:
        return PendingOutput(
            job=job,
            checkpoint_id=self.checkpoint_id,
            uri=self.uri,
            kind=self.kind,
            app_id=self.app_id,
            table_schema=self.table_schema,
            files=tuple(dict(f) for f in self.files),
            epoch=self.epoch,
            recorded_at=self.recorded_at,
            committed_at=self.committed_at,
            last_error=self.last_error,
        )


class SkippedCheckpointRow(Base):
    __tablename__ = "statecore_skipped_checkpoints"
    __table_args__ = (sa.UniqueConstraint("job_id", "checkpoint_id"),)

    id: Mapped[int] = mapped_column(_ID, primary_key=True)
    job_id: Mapped[int] = mapped_column(_ID, sa.ForeignKey("statecore_jobs.id"))
    checkpoint_id: Mapped[int] = mapped_column(sa.BigInteger)
    reason: Mapped[str] = mapped_column(sa.Text)
    skipped_at: Mapped[datetime]

    def to_record(self, job: str) -> SkippedCheckpoint:
        return SkippedCheckpoint(
            job=job,
            checkpoint_id=self.checkpoint_id,
            reason=self.reason,
            skipped_at=self.skipped_at,
        )


class OutputOwnerRow(Base):
    __tablename__ = "statecore_output_owners"

    uri: Mapped[str] = mapped_column(sa.String(1000), primary_key=True)
    job: Mapped[str] = mapped_column(sa.String(200))
    operator: Mapped[str] = mapped_column(sa.String(200))
    kind: Mapped[str] = mapped_column(sa.String(16))
    bound_at: Mapped[datetime]

    def to_record(self) -> OutputOwner:
        return OutputOwner(
            uri=self.uri,
            job=self.job,
            operator=self.operator,
            kind=self.kind,
            bound_at=self.bound_at,
        )
