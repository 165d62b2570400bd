"""The checkpoint catalog: jobs, registered states, checkpoints, savepoints and maintenance locks
in a SQLAlchemy database.

SQLite (the local default) and Postgres (production) run the same code. This package is the only
place in statecore that imports SQLAlchemy; everything it returns is a frozen record.
"""

from __future__ import annotations

from statecore.catalog.catalog import RUN_OPERATION, Catalog
from statecore.catalog.migrations import SCHEMA_VERSION
from statecore.catalog.records import (
    TABLE_KINDS,
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

__all__ = [
    "RUN_OPERATION",
    "SCHEMA_VERSION",
    "TABLE_KINDS",
    "Catalog",
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
