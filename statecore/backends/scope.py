"""``TaskScope``: where a keyed backend runs and exactly which snapshot it restores.

A runtime hands it to a backend factory next to the contract's arguments. Backends that keep
state on local disk between runs use it to name their directory and to recognise a local
instance that already is at the checkpoint being restored; the heap backend ignores it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from statecore.backends.base import RestoreSource

__all__ = ["TaskScope", "RestoredFiles"]

RestoredFiles = Mapping[str, Mapping[int, tuple[str, ...]]]
"""Per state, per key group of the task's range: the snapshot files (table-relative paths)."""


@dataclass(frozen=True, kw_only=True)
class TaskScope:
    """One parallel instance of a keyed operator in one run."""

    job: str
    operator: str
    subtask_index: int
    checkpoint_id: int
    """The checkpoint this run writes."""
    home: str
    """``STATECORE_HOME`` as resolved where the job was planned."""
    restored_checkpoint_id: int | None = None
    restored_files: RestoredFiles = field(default_factory=dict)
    """The files of the restored checkpoint, for the task's key groups only."""
    restore_source_for: Callable[[Collection[int]], RestoreSource] | None = None
    """A restore source reading only the given key groups (of the restored checkpoint)."""
