"""The statecore exception tree.

Every error the library raises on bad input derives from :class:`StateError`, and each message
names what it is about: the job, operator, state, key group or checkpoint.

    StateError
    ├── ConfigError                    invalid configuration or arguments
    ├── UnknownStateError              a state name that is not registered
    ├── StateDescriptorConflictError   same name registered with another kind or type
    ├── StateAccessError               state used outside a keyed context, or with a bad value
    ├── KeyTypeError                   a key that cannot be hashed consistently with Spark
    ├── KeyGroupOutOfRangeError        a key outside the backend's key-group range
    ├── StateMigrationError            restored schema incompatible with the descriptor
    ├── MaxParallelismMismatchError    restore with another max parallelism
    ├── JobNotFoundError               a job the catalog does not know
    ├── CheckpointNotFoundError        a checkpoint (or savepoint) that does not exist
    ├── CheckpointCommitError          a commit conflict or a failed checkpoint commit
    ├── SnapshotWriteError             a snapshot file that cannot be written
    ├── CorruptSnapshotError           snapshot files missing, unreadable or inconsistent
    ├── MaintenanceLockedError         another maintenance operation holds the job
    └── StateRepairError               a repair statement that would break the state's layout
"""

from __future__ import annotations

__all__ = [
    "StateError",
    "ConfigError",
    "UnknownStateError",
    "StateDescriptorConflictError",
    "StateAccessError",
    "KeyTypeError",
    "KeyGroupOutOfRangeError",
    "StateMigrationError",
    "MaxParallelismMismatchError",
    "JobNotFoundError",
    "CheckpointNotFoundError",
    "CheckpointCommitError",
    "SnapshotWriteError",
    "CorruptSnapshotError",
    "MaintenanceLockedError",
    "StateRepairError",
]


class StateError(Exception):
    """Root of every statecore error."""


class ConfigError(StateError, ValueError):
    """Invalid configuration or arguments."""


class UnknownStateError(StateError, KeyError):
    """A state name that is not registered for the job or operator."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class StateDescriptorConflictError(StateError):
    """A state name registered twice with a different kind or type."""


class StateAccessError(StateError):
    """State accessed outside a keyed context, or given a value it cannot hold."""


class KeyTypeError(StateError, TypeError):
    """A key whose type cannot be hashed consistently with Spark's ``hash()``."""


class KeyGroupOutOfRangeError(StateError):
    """A key whose key group lies outside the backend's key-group range."""


class StateMigrationError(StateError):
    """A restored state's stored schema is incompatible with its descriptor."""


class MaxParallelismMismatchError(StateError):
    """A restore with a max parallelism other than the snapshot's."""


class JobNotFoundError(StateError, LookupError):
    """A job the checkpoint catalog does not know."""


class CheckpointNotFoundError(StateError, LookupError):
    """A checkpoint or savepoint that does not exist."""


class CheckpointCommitError(StateError):
    """A checkpoint commit that conflicted or failed; nothing of it is visible."""


class SnapshotWriteError(StateError):
    """A snapshot file that cannot be written; the checkpoint it belongs to does not complete."""


class CorruptSnapshotError(StateError):
    """Snapshot files that are missing, unreadable or inconsistent with the catalog."""


class MaintenanceLockedError(StateError):
    """Another maintenance operation (savepoint, rescale, cleanup, repair) holds the job."""


class StateRepairError(StateError):
    """A repair statement that is not allowed, e.g. one that changes the key column."""
