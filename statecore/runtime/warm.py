"""State kept warm between runs: a task continues the backend its process used in the last run.

A streaming job is a run per micro-batch. Restoring a task's key-group range from the Delta
tables every time makes each micro-batch cost as much as the state is large; Flink instead keeps
each task's backend alive between checkpoints. Here, a task that snapshotted its state leaves its
backend (heap or RocksDB, with its timers) and its operator state in a process-wide
:class:`WarmPool`, and the next run's task for the same subtask, if it lands in the same Python
worker, takes them instead of restoring.

It may only do so when what it holds *is* the checkpoint the run restores. A :class:`WarmScope`
must be equal (job, operator, subtask, parallelism, key-group range, max parallelism, key type,
backend and its options), and so must a token: the :func:`~statecore.runtime.restore.fingerprint`
of the exact files (per table and key group of the range, the subtask's operator state) that the
task's state consists of. The task computes it after its snapshot from the files it restored and
those it wrote; the next run computes it from the
:class:`~statecore.runtime.restore.RestorePlan` the driver built from the catalog's *completed*
checkpoint. Snapshot file names carry a random part per write, so the two digests agree only when
the driver completed this very snapshot (or a later checkpoint that changed none of the task's
files, such as an empty micro-batch, which ran no task), and a checkpoint id alone never makes
them agree:

- the checkpoint failed or was rolled back: the next run restores an older checkpoint, whose
  files are not the ones the task wrote;
- another attempt of the same run wrote the committed files, or another process or maintenance
  operation (TTL cleanup, repair, restore, a savepoint restore) made the checkpoint: other files;
- a rescale: another key-group range or parallelism.

Any mismatch closes the entry (a RocksDB instance is closed and left on disk, where a cold task
may still reopen it, see :mod:`statecore.backends.rocksdb.local`) and the task restores as usual.
A kept RocksDB instance holds its directory's lock; when a task of another Python worker asks for
that directory, a watcher thread of the pool closes the entry so that the task can reopen it.
An entry is taken out of the pool while a task uses it and put back only after a successful
snapshot, so a failed or concurrent attempt never sees a half-updated one. The pool keeps entries
of one job and operator only (the one that ran last): memory stays bounded by what the process's
tasks held anyway.

The user function is a fresh copy each run (Spark unpickles it): it is opened against the kept
backend and operator state, and its state handles resolve to the same state objects. The clock of
TTL and processing-time timers is the new run's (:class:`RunClock`); the watermark starts where a
restored one does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from statecore.backends import BackendParameters, KeyedStateBackend
from statecore.backends.operator import OperatorStateMode, OperatorStateStore
from statecore.keygroups import KeyGroupRange
from statecore.runtime.collector import release_frozen
from statecore.runtime.live import LIVE
from statecore.runtime.restore import TaskFiles, fingerprint
from statecore.runtime.task import StateSnapshotResult, TableUris, table_uri
from statecore.ttl.time import SystemTimeProvider, TtlTimeProvider
from statecore.types import TypeInfo

__all__ = [
    "RunClock",
    "WarmScope",
    "WarmEntry",
    "WarmPool",
    "WARM_POOL",
    "snapshot_token",
]

log = logging.getLogger(__name__)

RELEASE_POLL = 0.02
"""Seconds between two checks whether another process asks for a kept entry's local files."""


class RunClock:
    """The processing-time clock of a kept backend: the current run's clock (``target``), so
    TTL states and timers created in an earlier run read the time of the run they serve."""

    def __init__(self, target: TtlTimeProvider | None = None) -> None:
        self.target: TtlTimeProvider = target or SystemTimeProvider()

    def current_timestamp(self) -> int:
        return self.target.current_timestamp()


@dataclass(frozen=True, kw_only=True)
class WarmScope:
    """What must be equal for a task to take a kept entry (besides the checkpoint token)."""

    job: str
    operator: str
    subtask_index: int
    parallelism: int
    key_groups: KeyGroupRange
    max_parallelism: int
    key_type: TypeInfo
    backend: BackendParameters
    changelog: bool = False
    """Whether the backend tracks changed keys (changelog checkpoints): set before any state
    is registered, so a kept backend serves only runs with the same setting."""


@dataclass(kw_only=True)
class WarmEntry:
    """A task's state after its snapshot, and the token of the checkpoint that snapshot is."""

    scope: WarmScope
    token: str
    checkpoint_id: int
    """The checkpoint whose snapshot the state is (not necessarily completed)."""
    backend: KeyedStateBackend
    operator_state: OperatorStateStore
    clock: RunClock

    @property
    def key_groups(self) -> int:
        return len(self.scope.key_groups)

    def reusable_operator_state(self) -> OperatorStateStore | None:
        """The kept operator state, unless a union list state makes a restore differ from it
        (every instance restores everyone's elements): then ``None``, restore it."""
        store = self.operator_state
        if any(store.mode(name) is OperatorStateMode.UNION for name in store.state_names):
            return None
        return store

    def close(self) -> None:
        LIVE.release(self.backend)  # no live read touches it from now on
        self.backend.close()


class WarmPool:
    """Kept entries of this process, by subtask of the job and operator that ran last."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, int], WarmEntry] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def take(
        self, scope: WarmScope, token: str, stale: Callable[[WarmEntry], bool] | None = None
    ) -> WarmEntry | None:
        """The entry of ``scope``'s subtask when it is at ``scope`` and ``token``, removed from
        the pool (else ``None``: a mismatching entry is closed). Entries of other jobs or
        operators are closed, and so are the job's entries of other subtasks that are
        ``stale`` (e.g. left behind the checkpoint being restored, as another worker ran their
        subtask since)."""
        with self._lock:
            others = [
                self._entries.pop(k)
                for k in list(self._entries)
                if k[:2] != (scope.job, scope.operator)
                or (stale is not None and k[2] != scope.subtask_index and stale(self._entries[k]))
            ]
            entry = self._entries.pop((scope.job, scope.operator, scope.subtask_index), None)
        _close_all(others)
        if entry is None:
            return None
        if entry.scope != scope or entry.token != token:
            log.info(
                "job %s, operator %s, subtask %d: the state kept from the last run is not the "
                "checkpoint to restore (%s); restoring",
                scope.job,
                scope.operator,
                scope.subtask_index,
                "another scope" if entry.scope != scope else "another checkpoint",
            )
            _close_all([entry])
            return None
        return entry

    def put(self, entry: WarmEntry) -> None:
        """Keep ``entry`` for the next run (replacing, and closing, any other of its subtask)."""
        scope = entry.scope
        with self._lock:
            old = self._entries.pop((scope.job, scope.operator, scope.subtask_index), None)
            self._entries[(scope.job, scope.operator, scope.subtask_index)] = entry
        if old is not None and old is not entry:
            _close_all([old])
        entry.backend.on_kept()
        if self._watcher is None and type(entry.backend).release_requested is not (
            KeyedStateBackend.release_requested
        ):
            self._watcher = threading.Thread(
                target=self._watch, name="statecore-warm-release", daemon=True
            )
            self._watcher.start()

    def _watch(self) -> None:
        """Close kept entries whose local resources another process asks for (a RocksDB
        directory that a task of another Python worker is about to restore from)."""
        while True:
            time.sleep(RELEASE_POLL)
            with self._lock:
                wanted = [k for k, e in self._entries.items() if e.backend.release_requested()]
                released = [self._entries.pop(k) for k in wanted]
            _close_all(released)

    def clear(self) -> None:
        """Close and forget every entry."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        _close_all(entries)


def _close_all(entries: Iterable[WarmEntry]) -> None:
    for entry in entries:
        release_frozen()  # its objects go back to the cyclic collector
        try:
            entry.close()
        except Exception:  # a kept backend that fails to close loses nothing committed
            log.warning("closing a kept backend of %s failed", entry.scope, exc_info=True)


WARM_POOL = WarmPool()
"""The pool of this process (a Spark Python worker keeps it between the tasks it runs)."""


def snapshot_token(
    restored: TaskFiles,
    snapshot: Collection[StateSnapshotResult],
    table_uris: TableUris,
    subtask: int,
) -> str:
    """The token of a task's state right after its snapshot: the files it
    ``restored`` (:meth:`~statecore.runtime.restore.RestorePlan.task_files`), with each changed
    key group replaced by what the snapshot wrote for it (nothing when it became empty), the
    change files it appended added to their key groups' pending ones (changelog checkpoints),
    and its subtask's operator state replaced by the files written for it."""
    files: TaskFiles = {table: dict(parts) for table, parts in restored.items()}
    for result in snapshot:
        table = (
            result.table_kind,
            result.state,
            table_uri(table_uris, result.table_kind, result.state),
        )
        parts = files.setdefault(table, {})
        changed = (subtask,) if result.replace_all else result.changed_key_groups
        for part in changed:
            parts[part] = tuple(sorted(f.path for f in result.files if f.key_group == part))
        if result.append:  # change files add to their key groups' pending ones
            for f in result.files:
                if f.key_group not in changed:
                    parts[f.key_group] = tuple(sorted((*parts.get(f.key_group, ()), f.path)))
    return fingerprint(files)
