"""The statecore exception tree.

Every error the library raises on bad input derives from :class:`StateError`, and each message
names what it is about: the job, operator, state, key group or checkpoint.

    StateError
    ├── ConfigError                    invalid configuration or arguments
    │   ├── CheckpointOrderError       a checkpoint id below the job's latest completed one
    │   │   └── CheckpointGapError     a run that would leave an earlier interval unprocessed
    │   └── PyFlinkUnsupportedError    a PyFlink option statecore.pyflink cannot honour
    ├── CatalogError                   a checkpoint catalog that is corrupt or not a catalog
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
    │   ├── ReplayMismatchError        a checkpoint id replayed with other input than it completed
    │   ├── ForeignCommitError         a state table another writer committed to (nothing undone)
    │   └── OutputCommitPendingError   a completed checkpoint whose output is not committed yet
    │       └── OutputFilesMissingError  pending output files that are gone (nothing committed)
    ├── SnapshotWriteError             a snapshot file that cannot be written
    ├── CorruptSnapshotError           snapshot files missing, unreadable or inconsistent
    ├── ConcurrentRunError             another writer holds the job's lease, or took it over
    │   └── MaintenanceLockedError     the holder is a maintenance operation
    ├── OutputOwnedError               an output table another job or operator writes
    │   └── TableOwnedError            an output table whose owner, written in it, is another
    ├── OutputRowsUnavailableError     a checkpoint's output rows another tool changed
    ├── RestoreWouldDiscardError       a restore that would discard later checkpoints
    ├── CatalogBehindWarehouseError    a catalog that is empty or older than the job's tables
    ├── StateRepairError               a repair statement that would break the state's layout
    ├── StateAdoptionError             edited state tables refused as a savepoint (rows named)
    ├── StateMismatchError             state that differs from the state it must equal
    └── PyFlinkSpellingError           a PyFlink spelling on the Pythonic API (also an
                                       AttributeError and a TypeError): names statecore's
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = [
    "StateError",
    "ConfigError",
    "CheckpointOrderError",
    "CheckpointGapError",
    "PyFlinkUnsupportedError",
    "CatalogError",
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
    "ReplayMismatchError",
    "ForeignCommitError",
    "OutputCommitPendingError",
    "OutputFilesMissingError",
    "OutputRowsUnavailableError",
    "SnapshotWriteError",
    "CorruptSnapshotError",
    "ConcurrentRunError",
    "MaintenanceLockedError",
    "OutputOwnedError",
    "TableOwnedError",
    "RestoreWouldDiscardError",
    "CatalogBehindWarehouseError",
    "StateRepairError",
    "StateAdoptionError",
    "StateMismatchError",
    "PyFlinkSpellingError",
    "PyFlinkSpelling",
    "COMING_FROM_PYFLINK",
]

COMING_FROM_PYFLINK = "see docs/pyflink.md, 'Coming from PyFlink'"
"""Where a :class:`PyFlinkSpellingError` sends the reader."""


class StateError(Exception):
    """Root of every statecore error."""


class ConfigError(StateError, ValueError):
    """Invalid configuration or arguments."""


class CheckpointOrderError(ConfigError):
    """A run whose checkpoint id is below the job's latest completed checkpoint: ids increase."""


class CheckpointGapError(CheckpointOrderError):
    """A run that would complete a checkpoint while an earlier interval of the job (a day with
    input, a failed run) is neither completed nor skipped on purpose: its state would never
    hold that interval. The message names each missing interval and how to go on."""


class PyFlinkUnsupportedError(ConfigError, NotImplementedError):
    """A PyFlink name or option that :mod:`statecore.pyflink` cannot map onto statecore (the
    RocksDB compaction-filter TTL cleanup, two cleanup strategies at once, a type statecore cannot
    store): the message says what statecore offers instead."""


class CatalogError(StateError):
    """A checkpoint catalog that cannot be read: a corrupt, truncated or foreign database file."""


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


class ReplayMismatchError(CheckpointCommitError):
    """A replay of a completed checkpoint whose input differs from the input it completed with."""


class ForeignCommitError(CheckpointCommitError):
    """A state table that another writer (not statecore) committed to after the version the
    checkpoint builds on: the checkpoint fails and nothing is restored over that commit."""


class OutputCommitPendingError(CheckpointCommitError):
    """A checkpoint that completed, but whose output (or late-data) commit failed: its rows are
    committed by the job's next run, a replay of the checkpoint, or ``statecore catalog recover
    JOB`` (none of them commits them twice)."""


class OutputFilesMissingError(OutputCommitPendingError):
    """A completed checkpoint's pending output whose files are gone (or of another size) from
    its staging folder and from its table: the message names the checkpoint, the table and
    each file. Nothing is committed that points the table at them."""


class SnapshotWriteError(StateError):
    """A snapshot file that cannot be written; the checkpoint it belongs to does not complete."""


class CorruptSnapshotError(StateError):
    """Snapshot files that are missing, unreadable or inconsistent with the catalog."""


class ConcurrentRunError(StateError):
    """Another writer (a run or a maintenance operation) holds the job's lease, or took it over
    from this one: this writer's commits are refused and nothing it wrote becomes visible."""


class MaintenanceLockedError(ConcurrentRunError):
    """A maintenance operation (savepoint, rescale, cleanup, repair) holds the job."""


class OutputOwnedError(StateError):
    """An output (or late-data) table that the catalog binds to another job, operator or kind:
    one table has one writer."""


class TableOwnedError(OutputOwnedError):
    """An output (or late-data) table whose owner, recorded in the table itself, is another
    writer (another job, operator or home), or that another tool wrote and no statecore writer
    owns: nothing is written to it."""


class OutputRowsUnavailableError(StateError):
    """A completed checkpoint's output rows that cannot be read back alone: removed from the
    table by another tool's data change (a RESTORE to an earlier version, a DELETE), or
    rewritten by an OPTIMIZE whose original files a VACUUM then deleted. The message names the
    checkpoint, the table and the Delta operation with its version."""


class RestoreWouldDiscardError(StateError):
    """A restore from a savepoint older than the job's latest checkpoint, which would discard
    the checkpoints completed since (allowed only when forced)."""


class CatalogBehindWarehouseError(StateError):
    """The catalog is empty, lost or older than what the job's Delta tables show committed;
    ``statecore catalog recover JOB`` rebuilds it from the tables."""


class StateRepairError(StateError):
    """A repair statement that is not allowed, e.g. one that changes the key column."""


class StateAdoptionError(StateError):
    """Edited state tables that cannot become a savepoint: ``problems`` holds the first bad rows
    (each names its state, key, key group, expected key group and reason), ``total`` counts
    them all. Nothing was registered."""

    def __init__(self, message: str, problems: tuple[Any, ...] = (), total: int = 0) -> None:
        super().__init__(message)
        self.problems = problems
        self.total = total


class StateMismatchError(StateError):
    """State that differs from the state it must equal, e.g. after a rescale versus before."""


class PyFlinkSpellingError(StateError, AttributeError, TypeError):
    """A PyFlink spelling used on statecore's Pythonic API (``ctx.get_current_key()``,
    ``ctx.timer_service()``, ``descriptor.enable_time_to_live(...)``): the message names
    statecore's spelling. An ``AttributeError`` where statecore has no such name (so ``hasattr``
    is false), a ``TypeError`` where the name exists but is no method (``ctx.timestamp()``)."""


class PyFlinkSpelling:
    """A class attribute standing for a name PyFlink has and statecore spells otherwise:
    reading it, from the class or an instance, raises :class:`PyFlinkSpellingError` naming
    statecore's spelling. It costs the other names of the class nothing (a ``__getattr__``
    would make every attribute read of a slotted class slower).

    >>> class Context:
    ...     get_current_key = PyFlinkSpelling("ctx.current_key (an attribute)")
    >>> Context().get_current_key()
    Traceback (most recent call last):
    ...
    statecore.errors.PyFlinkSpellingError: Context.get_current_key is PyFlink's spelling; \
statecore spells it ctx.current_key (an attribute) (see docs/pyflink.md, 'Coming from PyFlink')
    >>> hasattr(Context(), "get_current_key")
    False
    """

    def __init__(self, statecore: str) -> None:
        self.statecore = statecore
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> NoReturn:
        cls = owner or type(instance)
        raise PyFlinkSpellingError(
            f"{cls.__name__}.{self.name} is PyFlink's spelling; statecore spells it "
            f"{self.statecore} ({COMING_FROM_PYFLINK})"
        )
