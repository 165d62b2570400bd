"""Each task's part of the restore plan, cut once on the driver.

The driver's :class:`~statecore.runtime.restore.RestorePlan` names every file of the checkpoint
being restored: at max parallelism 32,768, 32,768 files per keyed state. :class:`TaskShares` cuts
it once, on the driver, into what each subtask restores: the files of keyed state, pending
changes and timers grouped by the subtask whose key groups hold them, each subtask's group
pickled and compressed on its own (paths and sizes repeat: about a quarter of the plan's
bytes travel with the tasks' spec). A task unpickles only its own part
(:meth:`TaskShares.share`), so what it decodes and looks through follows its key groups, not
the checkpoint's; what every task needs whole (the registered states and their schemas, the
operator-state files each subtask redistributes) is kept once, in :attr:`TaskShares.common`.

>>> from statecore.runtime.restore import RestorePlan, RestoredState
>>> from statecore.snapshot import TableFile
>>> files = tuple(TableFile(f"key_group={kg}/a.parquet", kg, 1, 10) for kg in range(8))
>>> plan = RestorePlan("job", "op", checkpoint_id=3, states={"s": RestoredState("u", "", files)})
>>> shares = TaskShares.cut(plan, parallelism=2, max_parallelism=8)
>>> [f.key_group for f in shares.share(1).states["s"].files]
[4, 5, 6, 7]
>>> shares.share(1).task_files(shares.key_groups(1), 1) == plan.task_files(range(4, 8), 1)
True
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from statecore.keygroups import (
    KeyGroupRange,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
)
from statecore.runtime.restore import RestoredState, RestorePlan
from statecore.snapshot import TIMERS, TableFile
from statecore.snapshot.changelog import CHANGES

__all__ = ["TaskShares"]

_Table = tuple[str, str]  # (table kind, state)
_Part = dict[_Table, list[tuple[str, int, int, int]]]  # per table: (path, key group, rows, size)


def _keyed_tables(plan: RestorePlan) -> list[tuple[_Table, RestoredState]]:
    """The tables of ``plan`` whose files belong to key groups (not operator state)."""
    tables = [(("keyed", name), r) for name, r in plan.states.items()]
    tables += [((CHANGES, name), r) for name, r in plan.changes.items()]
    if plan.timers is not None:
        tables.append(((TIMERS, TIMERS), plan.timers))
    return tables


@dataclass(frozen=True)
class TaskShares:
    """A restore plan cut into the part of each subtask of ``parallelism`` (pickled once per
    job to the executors with the tasks' spec).

    ``common`` is the plan without the files of its keyed tables (they are in ``parts``, one
    pickled, zlib-compressed part per subtask); :meth:`share` is one subtask's plan, holding
    only its files.
    """

    common: RestorePlan
    parallelism: int
    max_parallelism: int
    parts: tuple[bytes, ...]
    _shares: dict[int, RestorePlan] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def cut(cls, plan: RestorePlan, *, parallelism: int, max_parallelism: int) -> TaskShares:
        """``plan`` cut into the parts of the subtasks of ``parallelism``: each file goes to
        the subtask owning its key group, in the plan's order (one pass over the files)."""
        parts: list[_Part] = [{} for _ in range(parallelism)]
        for table, restored in _keyed_tables(plan):
            for f in restored.files:
                if not 0 <= f.key_group < max_parallelism:
                    continue  # no task restores it
                index = compute_operator_index_for_key_group(
                    max_parallelism, parallelism, f.key_group
                )
                parts[index].setdefault(table, []).append((f.path, f.key_group, f.rows, f.size))
        return cls(
            common=_with_files(plan, {}),
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            parts=tuple(zlib.compress(pickle.dumps(p, pickle.HIGHEST_PROTOCOL), 1) for p in parts),
        )

    @property
    def checkpoint_id(self) -> int | None:
        return self.common.checkpoint_id

    def key_groups(self, subtask: int) -> KeyGroupRange:
        return compute_key_group_range_for_operator_index(
            self.max_parallelism, self.parallelism, subtask
        )

    def share(self, subtask: int) -> RestorePlan:
        """The plan of ``subtask``: its key groups' files and the common part (its part
        unpickled once per process)."""
        plan = self._shares.get(subtask)
        if plan is None:
            plan = self._shares[subtask] = self._assemble([subtask])
        return plan

    def plan_for(self, key_groups: KeyGroupRange, subtask: int) -> RestorePlan:
        """A plan holding the files of ``key_groups`` (at least), for ``subtask``'s operator
        state: :meth:`share` when they are ``subtask``'s; else (a range of another
        parallelism) the parts of the subtasks they overlap."""
        if 0 <= subtask < self.parallelism and key_groups == self.key_groups(subtask):
            return self.share(subtask)
        mine = key_groups.intersection(KeyGroupRange(0, self.max_parallelism - 1))
        if not len(mine):
            return self._assemble([])
        first, last = (
            compute_operator_index_for_key_group(self.max_parallelism, self.parallelism, kg)
            for kg in (mine.start, mine.end)
        )
        return self._assemble(range(first, last + 1))

    def _assemble(self, subtasks: Iterable[int]) -> RestorePlan:
        files: dict[_Table, list[TableFile]] = {}
        for index in subtasks:
            if 0 <= index < len(self.parts):
                part: _Part = pickle.loads(zlib.decompress(self.parts[index]))
                for table, rows in part.items():
                    files.setdefault(table, []).extend(TableFile(*row) for row in rows)
        return _with_files(self.common, files)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_shares"] = {}  # each process unpickles the parts it needs
        return state


def _with_files(plan: RestorePlan, files: dict[_Table, list[TableFile]]) -> RestorePlan:
    """``plan`` with ``files`` as the files of its keyed tables (none for a table not in it)."""
    tables = dict(_keyed_tables(plan))

    def table(key: _Table) -> RestoredState:
        return replace(tables[key], files=tuple(files.get(key, ())))

    return replace(
        plan,
        states={name: table(("keyed", name)) for name in plan.states},
        changes={name: table((CHANGES, name)) for name in plan.changes},
        timers=None if plan.timers is None else table((TIMERS, TIMERS)),
    )
