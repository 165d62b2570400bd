"""What the checkpoint catalog stores, as plain immutable values.

The catalog hands these records in and out; no database object ever leaves
:mod:`statecore.catalog`. Timestamps are timezone-aware UTC.

>>> table = TableVersion(operator="count", state="total", table_kind="keyed",
...                      path="/wh/job/count/keyed/total", version=3, rows=10, bytes=800,
...                      key_groups={0: (6, 480), 7: (4, 320)})
>>> table.key_groups[7]
(4, 320)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain
from typing import Any

from statecore.catalog.sizes import DecodedSizes
from statecore.errors import ConfigError

__all__ = [
    "TABLE_KINDS",
    "CheckpointKind",
    "CheckpointRecord",
    "CheckpointStatus",
    "JobRecord",
    "LiveEndpoint",
    "MaintenanceLock",
    "OutputOwner",
    "PendingOutput",
    "SavepointRecord",
    "SkippedCheckpoint",
    "StateRecord",
    "TableVersion",
]

TABLE_KINDS = frozenset({"keyed", "operator", "timers", "changes"})
"""The kinds of Delta table a checkpoint names."""


class CheckpointStatus(enum.Enum):
    """Where a checkpoint is in its life; stored by name."""

    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    """Completed once, then expired by retention: its tables are forgotten (and may be vacuumed),
    its id is kept so that re-running it is still a no-op."""


class CheckpointKind(enum.Enum):
    """Why a checkpoint was taken; stored by name."""

    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"
    MAINTENANCE = "maintenance"


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    """A job the catalog knows, with its current parallelism."""

    name: str
    parallelism: int
    max_parallelism: int
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class StateRecord:
    """A state registered by an operator of a job.

    ``kind`` is the state's kind (``"value"``, ``"list"``, ``"map"``, ``"reducing"``,
    ``"aggregating"``, ``"operator_list"``, ``"union_list"``, ``"broadcast"``, ``"timers"``);
    ``schema`` is the serialized type schema, opaque to the catalog; ``ttl`` is the TTL
    configuration, or ``None`` when TTL is off.
    """

    job: str
    operator: str
    name: str
    kind: str
    descriptor: dict[str, Any]
    schema: str
    ttl: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for attr in ("job", "operator", "name", "kind"):
            if not getattr(self, attr):
                raise ConfigError(
                    f"state {self.name!r} of operator {self.operator!r} in job {self.job!r}: "
                    f"{attr} must not be empty"
                )


@dataclass(frozen=True, kw_only=True)
class TableVersion:
    """The Delta version of one state table that a checkpoint restores from.

    ``key_groups`` maps every key group present in the table *at that version* to its
    ``(rows, bytes)``.
    """

    operator: str
    state: str
    table_kind: str
    path: str
    version: int
    rows: int
    bytes: int
    key_groups: dict[int, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"table of state {self.state!r} of operator {self.operator!r}"
        if self.table_kind not in TABLE_KINDS:
            raise ConfigError(
                f"{where}: table_kind {self.table_kind!r} is not one of {sorted(TABLE_KINDS)}"
            )
        if not self.operator or not self.state or not self.path:
            raise ConfigError(f"{where}: operator, state and path must not be empty")
        if self.version < 0 or self.rows < 0 or self.bytes < 0:
            raise ConfigError(
                f"{where}: version, rows and bytes must be >= 0, got "
                f"{self.version}, {self.rows}, {self.bytes}"
            )
        if isinstance(self.key_groups, DecodedSizes):
            return  # checked as arrays when read from the catalog
        numbers = chain(self.key_groups, chain.from_iterable(self.key_groups.values()))
        if min(numbers, default=0) < 0:  # one pass in C: 32,768 key groups are common
            for key_group, (rows, size) in self.key_groups.items():
                if key_group < 0 or rows < 0 or size < 0:
                    raise ConfigError(
                        f"{where}: key group {key_group} has a negative number: ({rows}, {size})"
                    )


@dataclass(frozen=True, kw_only=True)
class CheckpointRecord:
    """A checkpoint (or savepoint) of a job, and the table versions it completed with."""

    job: str
    checkpoint_id: int
    kind: CheckpointKind
    status: CheckpointStatus
    parallelism: int
    max_parallelism: int
    started_at: datetime
    completed_at: datetime | None = None
    tables: tuple[TableVersion, ...] = ()
    restored_from: int | None = None
    error: str | None = None
    input_identity: str | None = None
    """What the checkpoint processed (micro-batch id and offsets, a fingerprint of the input
    files, or one the caller gave); a replay with another identity is refused. A MAINTENANCE
    checkpoint processes nothing: it has the identity of the state it holds (its base's, or the
    restored savepoint's)."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """What the run measured: ``latency`` (per state and access: samples, p50/p95/p99 in µs,
    when tracking was on), ``restore`` (per subtask: bytes read, seconds to restore), ``tasks``
    and ``warm_tasks`` (the tasks that ran, and those that continued the state their process
    kept from the last run instead of restoring it)."""
    watermark: int | None = None
    """The event-time watermark (epoch ms) the checkpoint completed with: the next run (batch or
    micro-batch) starts from it, and no run lowers it. ``None``: no event time seen yet."""

    @property
    def total_rows(self) -> int:
        """Rows over every table of the checkpoint."""
        return sum(table.rows for table in self.tables)

    @property
    def total_bytes(self) -> int:
        """Bytes over every table of the checkpoint."""
        return sum(table.bytes for table in self.tables)

    @property
    def warm_share(self) -> str | None:
        """``"k/n"``: k of the run's n tasks continued their state warm; ``None`` when the run
        did not record it (an operation, or a run before statecore recorded it)."""
        if "tasks" not in self.metrics:
            return None
        return f"{self.metrics.get('warm_tasks', 0)}/{self.metrics['tasks']}"

    @property
    def duration(self) -> timedelta | None:
        """From start to completion; ``None`` until the checkpoint completed."""
        if self.completed_at is None:
            return None
        return self.completed_at - self.started_at


@dataclass(frozen=True, kw_only=True)
class SavepointRecord:
    """A savepoint the catalog knows: a pin or an export.

    A **pin** (``pin`` set) keeps table versions of the job's own tables: ``pin`` is the pinned
    state's description (tables with their paths and versions, states, watermark, source input:
    :func:`statecore.checkpoint.points.pin_point` reads it), and retention, log cleanup and
    VACUUM keep what those versions need until the pin is deleted; ``path`` is the job's
    warehouse folder. An **export** (``pin`` is ``None``) is a self-contained copy in the folder
    ``path``. ``source_checkpoint`` is the checkpoint it was taken from (``None`` when it was
    derived from another savepoint); ``reason`` says which operation took it (``"manual"``,
    ``"rescale"``, ...).
    """

    job: str
    name: str
    path: str
    reason: str
    source_checkpoint: int | None
    parallelism: int
    max_parallelism: int
    rows: int
    bytes: int
    created_at: datetime
    pin: dict[str, Any] | None = None

    @property
    def kind(self) -> str:
        """``"pin"`` or ``"export"``."""
        return "export" if self.pin is None else "pin"


@dataclass(frozen=True, kw_only=True)
class MaintenanceLock:
    """The job's lease: the run or maintenance operation that holds the job, by whom, since
    when, with which fencing ``epoch`` (it increases with every acquisition) and until when
    (``expires_at``, unless renewed; ``None``: never)."""

    job: str
    operation: str
    owner: str
    acquired_at: datetime
    epoch: int = 0
    expires_at: datetime | None = None

    @property
    def holder(self) -> str:
        """The holder, for messages."""
        return f"{self.operation!r} ({self.owner}, epoch {self.epoch})"


@dataclass(frozen=True, kw_only=True)
class LiveEndpoint:
    """Where a task of a job's latest run serves live lookups of its key groups: its
    ``address`` (``host:port``), and the checkpoint its state was at when the run completed
    (:mod:`statecore.runtime.live`)."""

    job: str
    operator: str
    subtask: int
    key_group_start: int
    key_group_end: int
    address: str
    checkpoint_id: int
    updated_at: datetime | None = None

    def holds(self, key_group: int) -> bool:
        return self.key_group_start <= key_group <= self.key_group_end


@dataclass(frozen=True, kw_only=True)
class PendingOutput:
    """A checkpoint's pending output commit: the files its tasks wrote into the output (or
    late-data, ``kind``) table at ``uri``, committed there only once the checkpoint completed,
    as the application transaction ``app_id`` at the checkpoint's id. ``table_schema`` is the
    table's row schema (serialized by the caller, to create the table if it does not exist),
    ``files`` the files as the caller describes them (JSON objects). ``recorded_at`` is when
    the checkpoint recorded them, ``committed_at`` is set once the commit is in the table, and
    ``last_error`` says why the last attempt to commit them failed (``None``: none failed)."""

    job: str
    checkpoint_id: int
    uri: str
    kind: str
    app_id: str
    table_schema: str
    files: tuple[dict[str, Any], ...]
    epoch: int | None = None
    recorded_at: datetime | None = None
    committed_at: datetime | None = None
    last_error: str | None = None


@dataclass(frozen=True, kw_only=True)
class SkippedCheckpoint:
    """A checkpoint id of ``job`` that its runs go past on purpose: ``reason`` says why (who
    recorded it and what the interval lacked, e.g. a day whose input is broken)."""

    job: str
    checkpoint_id: int
    reason: str
    skipped_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class OutputOwner:
    """The writer an output (or late-data, ``kind``) table at ``uri`` is bound to."""

    uri: str
    job: str
    operator: str
    kind: str
    bound_at: datetime | None = None

    @property
    def writer(self) -> str:
        """The writer, for messages."""
        return f"job {self.job!r}, operator {self.operator!r} ({self.kind})"
