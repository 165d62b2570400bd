"""The merging windows of one key (Flink's ``MergingWindowSet``), for session windows.

Each open window maps to the window whose namespace holds its state (its *state window*). When
a new window merges with open ones, the result takes over one of their state windows and the
others' state is merged into it (``merge_namespaces``), so merging moves no more state than the
merged windows' own. The mapping is keyed state of the key (MapState ``window_merging``, in the
void namespace), so it is checkpointed, restored and rescaled with the windows' state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statecore.descriptors import MapStateDescriptor
from statecore.runtime.windows.assigners import MergingWindowAssigner
from statecore.runtime.windows.windows import Window, window_of
from statecore.state import VOID_NAMESPACE

__all__ = ["MERGING", "MergingWindowSet", "MergeFunction"]

MERGING = MapStateDescriptor("window_merging", str, str)
"""Each open window's namespace mapped to its state window's."""

MergeFunction = Callable[[Window, list[Window], Window, list[Window]], None]
"""Called for each merge: the result, the windows merged into it, the result's state window
and the state windows merged into that."""


class MergingWindowSet:
    """The current key's open windows and their state windows, read from ``state``; changes
    are written back by :meth:`persist`."""

    def __init__(self, assigner: MergingWindowAssigner, state: Any) -> None:
        self._assigner = assigner
        self._state = state
        state.set_current_namespace(VOID_NAMESPACE)
        self._mapping: dict[Window, Window] = {window_of(w): window_of(s) for w, s in state.items()}
        self._initial = dict(self._mapping)

    def state_window(self, window: Window) -> Window | None:
        return self._mapping.get(window)

    def retire_window(self, window: Window) -> None:
        """``window`` is cleaned up (or was late): forget it."""
        self._mapping.pop(window, None)

    def add_window(self, new_window: Window, merge: MergeFunction) -> Window:
        """Add ``new_window``, merging it with open windows; the window it ended up in."""
        mapping = self._mapping
        results = self._assigner.merge_windows([*mapping, new_window])
        result_window, merged_new = new_window, False
        for merge_result, members in results:
            if len(members) < 2:
                continue
            merged = list(members)
            if new_window in merged:
                merged.remove(new_window)
                merged_new, result_window = True, merge_result
            target_state_window = mapping[merged[0]]
            merged_state_windows = [mapping.pop(w) for w in merged if w in mapping]
            mapping[merge_result] = target_state_window
            merged_state_windows.remove(target_state_window)
            if not (len(merged) == 1 and merged[0] == merge_result):
                merge(merge_result, merged, target_state_window, merged_state_windows)
        if result_window == new_window and not merged_new:
            mapping[result_window] = result_window
        return result_window

    def persist(self) -> None:
        """Write the mapping back to keyed state, if it changed."""
        if self._mapping == self._initial:
            return
        state = self._state
        state.set_current_namespace(VOID_NAMESPACE)
        state.clear()
        if self._mapping:
            state.put_all({w.namespace: s.namespace for w, s in self._mapping.items()})
        self._initial = dict(self._mapping)
