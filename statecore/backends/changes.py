"""Which keys of a state changed since the last snapshot, for changelog checkpoints.

A backend's states mark the key group of every write in a set (its *dirty* key groups, what an
incremental snapshot rewrites). With changelog checkpoints on, that set is a
:class:`ChangedKeys`: adding a key group also records the backend's current key, so a checkpoint
can write just the changed keys (Flink's changelog state backend, FLIP-158). The unit of change is
a key of one state, all namespaces (and all map entries) of it together: a change file holds the
full rows of each changed key, or a tombstone when none are left. The states are unchanged; the
only cost is one Python call per write, and none at all when changelog is off (a plain set).

>>> from statecore.backends.context import KeyContext
>>> context = KeyContext()
>>> dirty = ChangedKeys(context)
>>> context.key, context.key_group = "user-1", 7
>>> dirty.add(7)
>>> mark_changed(dirty, 9, "user-2")  # a write for a key that is not current (TTL cleanup)
>>> sorted(dirty), dirty.by_key_group()
([7, 9], {7: {'user-1'}, 9: {'user-2'}})
"""

from __future__ import annotations

from typing import Any

from statecore.backends.context import KeyContext

__all__ = ["ChangedKeys", "mark_changed"]


class ChangedKeys(set[int]):
    """Dirty key groups that also remember the keys written (the current key of ``context``)."""

    __slots__ = ("keys", "_context")

    def __init__(self, context: KeyContext) -> None:
        super().__init__()
        self.keys: set[tuple[int, Any]] = set()
        self._context = context

    def add(self, key_group: int) -> None:
        set.add(self, key_group)
        self.keys.add((key_group, self._context.key))

    def add_key(self, key_group: int, key: Any) -> None:
        set.add(self, key_group)
        self.keys.add((key_group, key))

    def clear(self) -> None:
        set.clear(self)
        self.keys.clear()

    def by_key_group(self) -> dict[int, set[Any]]:
        """The changed keys of each changed key group."""
        out: dict[int, set[Any]] = {}
        for key_group, key in self.keys:
            out.setdefault(key_group, set()).add(key)
        return dict(sorted(out.items()))


def mark_changed(dirty: set[int], key_group: int, key: Any) -> None:
    """Mark ``key`` of ``key_group`` changed (only the key group when keys are not tracked)."""
    if isinstance(dirty, ChangedKeys):
        dirty.add_key(key_group, key)
    else:
        dirty.add(key_group)
