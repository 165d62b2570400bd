"""The keyed state backend contract.

A backend holds the state of one key-group range. It keeps the current key (set by the runtime
before each record) in its :class:`~statecore.backends.context.KeyContext`, which its states and
timers read, hands out state handles bound to it, and moves state in and out per key group
as Arrow tables with the snapshot columns ``key``, ``namespace``, [``user_key``], ``value`` and,
when TTL is on, ``ttl_timestamp``: the format is backend-independent, so a snapshot from one
backend restores into the other.

What a backend implements is small: :meth:`~KeyedStateBackend._create_state` for the five kinds,
:meth:`~KeyedStateBackend.keys`, changed-key-group tracking, and the stored rows of one key group
(:meth:`~KeyedStateBackend._snapshot_key_group`, :meth:`~KeyedStateBackend._restore_key_group`).
Everything else is shared here: handle caching and conflicts, TTL (a decorator layer over states
whose stored values are ``{"value": v, "ttl_timestamp": ms}`` structs, see
:mod:`statecore.ttl.storage`) and timers (:class:`~statecore.backends.timers.TimerService`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from statecore.backends.changes import ChangedKeys
from statecore.backends.context import KeyContext
from statecore.backends.timers import TimerService
from statecore.descriptors import StateDescriptor, StateKind
from statecore.errors import (
    ConfigError,
    KeyGroupOutOfRangeError,
    StateAccessError,
    StateDescriptorConflictError,
    UnknownStateError,
)
from statecore.keygroups import Key, KeyGroupRange, assign_to_key_group
from statecore.state import VOID_NAMESPACE, State
from statecore.ttl.config import CleanupStrategy
from statecore.ttl.states import create_ttl_state
from statecore.ttl.storage import TTL_TIMESTAMP, TtlStorage
from statecore.ttl.time import SystemTimeProvider, TtlTimeProvider
from statecore.types import TypeInfo

__all__ = ["BatchKeySetter", "KeyedStateBackend", "RestoreSource", "Purge", "snapshot_schema"]

RestoreSource = Callable[[StateDescriptor], Iterable[tuple[int, pa.Table]]]
"""Yields ``(key_group, rows)`` of one state's snapshot, for the backend's key groups only."""

Purge = Callable[[Any], Any]
"""Maps one stored entry to what remains of it after TTL cleanup (``None``: nothing)."""

_KG_CACHE_LIMIT = 1 << 20


class BatchKeySetter(NamedTuple):
    """A backend's way of making the keys of a checked batch current, one record at a time.

    The loop sets ``context.key`` and ``context.key_group`` and then, when ``listeners`` is
    not empty, calls each of them: whatever else making a key current takes (RocksDB's key
    prefix, a TTL state cleaned up at every record). ``listeners`` is the backend's own list,
    so a state registered in the middle of a batch takes effect from the next record. A heap
    backend without such states costs the loop no call per record.
    """

    context: KeyContext
    listeners: list[Callable[[], None]]


def snapshot_schema(key_type: TypeInfo, descriptor: StateDescriptor) -> pa.Schema:
    """The Arrow schema of one state's snapshot rows (without the ``key_group`` partition).

    >>> from statecore.descriptors import ListStateDescriptor
    >>> from statecore.ttl import StateTtlConfig
    >>> from datetime import timedelta
    >>> d = ListStateDescriptor("seen", str, ttl=StateTtlConfig(ttl=timedelta(hours=1)))
    >>> snapshot_schema(TypeInfo.of(int), d).names
    ['key', 'namespace', 'value', 'ttl_timestamp']
    """
    fields = [
        pa.field("key", key_type.arrow, nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
    ]
    if descriptor.user_key_info is not None:
        fields.append(descriptor.user_key_info.field("user_key", nullable=False))
    fields.append(descriptor.value_info.field("value"))
    if descriptor.ttl_config is not None:
        ts = pa.list_(pa.int64()) if descriptor.kind is StateKind.LIST else pa.int64()
        fields.append(pa.field(TTL_TIMESTAMP, ts, nullable=False))
    return pa.schema(fields)


class KeyedStateBackend(ABC):
    """State for the keys of one key-group range; see the module docstring."""

    incremental_ttl_cleanup: ClassVar[bool] = False
    """Whether :meth:`_cleanup_incrementally` purges expired entries (heap: yes)."""

    def __init__(
        self,
        *,
        key_type: TypeInfo,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        restore_source: RestoreSource | None = None,
        ttl_time_provider: TtlTimeProvider | None = None,
    ) -> None:
        self.key_type = key_type
        self.key_group_range = key_group_range
        self.max_parallelism = max_parallelism
        self.ttl_time_provider: TtlTimeProvider = ttl_time_provider or SystemTimeProvider()
        self._restore_source = restore_source
        self._descriptors: dict[str, StateDescriptor] = {}
        self._states: dict[str, State] = {}
        self._ttl: dict[str, TtlStorage] = {}
        self._kg_cache: dict[Key, int] = {}
        self._key_listeners: list[Callable[[], None]] = []
        self._track_changes = False
        self._kept: set[str] = set()  # states kept by resume() not registered again yet
        self.key_context = KeyContext()
        """The current key, read by this backend's states and timers (see
        :mod:`statecore.backends.context`)."""
        self.timer_service = TimerService(self)

    # -- the current key -------------------------------------------------------------------
    @property
    def current_key(self) -> Any:
        if self.key_context.key_group is None:
            raise StateAccessError("no current key: keyed state is only available per record")
        return self.key_context.key

    @property
    def current_key_group(self) -> int:
        key_group = self.key_context.key_group
        if key_group is None:
            raise StateAccessError("no current key: keyed state is only available per record")
        return key_group

    def set_current_key(self, key: Key, key_group: int | None = None) -> None:
        """Make ``key`` current; ``key_group`` may be passed when already computed (by Spark)."""
        if key_group is None:
            key_group = self._kg_cache.get(key)
            if key_group is None:
                key_group = assign_to_key_group(key, self.max_parallelism)
                if len(self._kg_cache) >= _KG_CACHE_LIMIT:
                    self._kg_cache.clear()
                self._kg_cache[key] = key_group
        r = self.key_group_range
        if not r.start <= key_group <= r.end:
            raise KeyGroupOutOfRangeError(
                f"key {key!r} is in key group {key_group}, outside this backend's key groups "
                f"{r.start}..{r.end} (max parallelism {self.max_parallelism})"
            )
        context = self.key_context
        context.key = key
        context.key_group = key_group
        if self._key_listeners:
            for listener in self._key_listeners:
                listener()

    def batch_key_setter(self) -> BatchKeySetter:
        """How a task's record loop makes each key of a batch current, once the backend
        checked the batch's key groups (:meth:`check_key_groups`); see :class:`BatchKeySetter`.
        """
        return BatchKeySetter(self.key_context, self._key_listeners)

    def prefixed_key_setter(
        self, keys: pa.Array, key_groups: pa.Array
    ) -> tuple[BatchKeySetter, list[bytes]] | None:
        """For a backend whose states read the current key's encoded prefix
        (:attr:`KeyContext.prefix <statecore.backends.context.KeyContext.prefix>`): the prefix
        of every record of a checked batch, built once for the batch, and the setter whose
        listeners then leave the prefix alone; the loop assigns each record's prefix with its
        key. ``None`` (the default, and for keys the backend cannot encode as a column): the
        loop uses :meth:`batch_key_setter`."""
        return None

    def _add_key_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever a key is made current, from the next record on."""
        self._key_listeners.append(listener)

    def check_key_groups(self, key_groups: pa.Array, keys: Sequence[Key]) -> None:
        """Check a batch's key groups (computed by Spark, no nulls) once, before its records
        are made current as :meth:`batch_key_setter` says: every one is this backend's, else
        :class:`KeyGroupOutOfRangeError` for the first key outside its range."""
        if len(key_groups) == 0:
            return
        r = self.key_group_range
        bounds = pc.min_max(key_groups)
        if r.start <= bounds["min"].as_py() and bounds["max"].as_py() <= r.end:
            return
        for key, key_group in zip(keys, key_groups.to_pylist(), strict=True):
            if not r.start <= key_group <= r.end:
                self.set_current_key(key, key_group)  # raises

    # -- states ----------------------------------------------------------------------------
    def get_partitioned_state(self, descriptor: StateDescriptor) -> State:
        """The state for ``descriptor``: created once per name, then the same handle.

        With a TTL the handle is a TTL decorator over a state whose stored values carry their
        last-access timestamp; without one it is the backend's own state (no TTL cost at all).
        """
        known = self._descriptors.get(descriptor.name)
        if known is not None:
            if descriptor.name in self._kept:  # the first registration since resume()
                self._kept.discard(descriptor.name)
                if known != descriptor or not known.same_functions(descriptor):
                    raise StateDescriptorConflictError(
                        f"state {descriptor.name!r} is kept from the last run as {known}; "
                        f"registered now as {descriptor} (restore it instead)"
                    )
            if known.kind is not descriptor.kind or known.describe() != descriptor.describe():
                raise StateDescriptorConflictError(
                    f"state {descriptor.name!r} is registered as {known.kind.value} "
                    f"{known.describe()}; cannot register it again as {descriptor.kind.value} "
                    f"{descriptor.describe()}"
                )
            return self._states[descriptor.name]
        ttl = descriptor.ttl_config
        if ttl is None:
            state = self._create_state(descriptor)
        else:
            storage = TtlStorage(descriptor)
            raw = self._create_state(storage.stored)
            cleanup = None
            if ttl.cleanup is CleanupStrategy.INCREMENTAL and self.incremental_ttl_cleanup:
                cleanup = self._incremental_cleanup_of(storage)
                if ttl.run_cleanup_for_every_record:
                    self._add_key_listener(cleanup)
            state = create_ttl_state(raw, storage, self.ttl_time_provider, cleanup)
            self._ttl[descriptor.name] = storage
        self._descriptors[descriptor.name] = descriptor
        self._states[descriptor.name] = state
        source = self._restore_source
        if source is not None:
            self._restore_state(descriptor.name, source(descriptor))
        return state

    def _restore_state(self, state_name: str, chunks: Iterable[tuple[int, pa.Table]]) -> None:
        """Load a newly registered state's snapshot, ``(key_group, rows)`` at a time (lazily
        read); a backend may override this to load them in bulk."""
        for key_group, rows in chunks:
            self.restore_key_group(state_name, key_group, rows)

    def _incremental_cleanup_of(self, storage: TtlStorage) -> Callable[[], None]:
        name, size, clock = (
            storage.descriptor.name,
            storage.config.cleanup_size,
            self.ttl_time_provider,
        )

        def cleanup() -> None:
            self._cleanup_incrementally(name, storage.purge(clock.current_timestamp()), size)

        return cleanup

    @property
    def descriptors(self) -> dict[str, StateDescriptor]:
        return dict(self._descriptors)

    def descriptor(self, name: str) -> StateDescriptor:
        try:
            return self._descriptors[name]
        except KeyError:
            raise UnknownStateError(
                f"unknown state {name!r}; registered: {sorted(self._descriptors)}"
            ) from None

    def apply_to_all_keys(
        self,
        descriptor: StateDescriptor,
        function: Callable[[Any, State], None],
        namespace: str = VOID_NAMESPACE,
    ) -> None:
        """Call ``function(key, state)`` for every key with a value in ``namespace``.

        The state is scoped to ``namespace`` and each key is made current in turn; the function
        may update or clear the state. The previous current key is restored afterwards.
        """
        state = self.get_partitioned_state(descriptor)
        state.set_current_namespace(namespace)
        previous = self.key_context.save()
        try:
            for key in list(self.keys(descriptor.name, namespace)):
                self.set_current_key(key)
                function(key, state)
        finally:
            self.key_context.restore(previous)

    # -- snapshots -------------------------------------------------------------------------
    def snapshot_key_group(self, state_name: str, key_group: int) -> pa.Table:
        """The rows of one key group (:func:`snapshot_schema`), possibly empty.

        With TTL the stored ``{"value", "ttl_timestamp"}`` structs become two columns, and under
        ``CleanupStrategy.FULL_SNAPSHOT`` expired entries are left out.
        """
        rows = self._snapshot_key_group(state_name, key_group)
        storage = self._ttl.get(state_name)
        if storage is None:
            return rows
        return storage.to_snapshot(rows, now=self.ttl_time_provider.current_timestamp())

    def restore_key_group(self, state_name: str, key_group: int, rows: pa.Table) -> None:
        """Load the snapshot rows of one key group of a registered state.

        Rows of a TTL state without a ``ttl_timestamp`` column (TTL just turned on) start their
        time to live now.
        """
        self._restore_key_group(state_name, key_group, self._stored_rows(state_name, rows))

    def _stored_rows(self, state_name: str, rows: pa.Table) -> pa.Table:
        """Snapshot rows of a registered state in the stored form ``_restore_key_group`` takes."""
        self.descriptor(state_name)  # raises UnknownStateError
        storage = self._ttl.get(state_name)
        if storage is not None:
            return storage.from_snapshot(rows, now=self.ttl_time_provider.current_timestamp())
        if TTL_TIMESTAMP in rows.column_names:  # TTL turned off
            return rows.drop_columns([TTL_TIMESTAMP])
        return rows

    # -- changelog checkpoints -------------------------------------------------------------
    def enable_change_tracking(self) -> None:
        """Record which keys change, not only which key groups (for changelog checkpoints, see
        :mod:`statecore.backends.changes`); before any state is registered."""
        if self._track_changes:
            return
        if self._descriptors:
            raise ConfigError(
                f"changelog: key tracking must be enabled before states are registered; "
                f"registered already: {sorted(self._descriptors)}"
            )
        self._track_changes = True

    @property
    def tracks_changes(self) -> bool:
        return self._track_changes

    def _new_dirty_set(self) -> set[int]:
        """The set a new state marks its written key groups in (keys too, when tracked)."""
        return ChangedKeys(self.key_context) if self._track_changes else set()

    def changed_keys(self, state_name: str) -> dict[int, set[Any]]:
        """The keys of each key group written since the last :meth:`mark_snapshotted` (only
        with :meth:`enable_change_tracking`)."""
        dirty = self._dirty_set(state_name)
        if not isinstance(dirty, ChangedKeys):
            raise ConfigError(f"state {state_name!r}: changed keys are not tracked")
        return dirty.by_key_group()

    def snapshot_changes(
        self, state_name: str, key_group: int, keys: Collection[Any]
    ) -> tuple[pa.Table, list[Any]]:
        """The rows (:func:`snapshot_schema`) of ``keys`` of one key group, and those of
        ``keys`` that have no rows left (their tombstones); TTL as :meth:`snapshot_key_group`."""
        rows = self._snapshot_keys(state_name, key_group, keys)
        storage = self._ttl.get(state_name)
        if storage is not None:
            rows = storage.to_snapshot(rows, now=self.ttl_time_provider.current_timestamp())
        present = set(rows.column("key").to_pylist())
        return rows, [k for k in keys if k not in present]

    def _snapshot_keys(self, state_name: str, key_group: int, keys: Collection[Any]) -> pa.Table:
        """The stored rows of ``keys`` of one key group (by default: the key group's rows,
        filtered)."""
        rows = self._snapshot_key_group(state_name, key_group)
        wanted = pa.array(list(keys), rows.schema.field("key").type)
        return rows.filter(pc.is_in(rows.column("key"), value_set=wanted))

    def _dirty_set(self, state_name: str) -> set[int]:
        """The set the states of ``state_name`` mark written key groups in."""
        raise ConfigError(f"{type(self).__name__} does not track changed keys")

    # -- what a backend implements ---------------------------------------------------------
    @abstractmethod
    def _create_state(self, descriptor: StateDescriptor) -> State:
        """A state of ``descriptor.kind`` storing values of ``descriptor``'s types.

        For a TTL state this is called with the stored descriptor (values are structs
        ``{"value": v, "ttl_timestamp": ms}``); a backend never sees a TTL config.
        """

    @abstractmethod
    def keys(self, state_name: str, namespace: str = VOID_NAMESPACE) -> Iterator[Any]:
        """Every key with a (possibly expired) value for ``state_name`` in ``namespace``."""

    @abstractmethod
    def changed_key_groups(self, state_name: str) -> set[int]:
        """Key groups written since the last :meth:`mark_snapshotted`."""

    @abstractmethod
    def mark_snapshotted(self) -> None:
        """Forget which key groups of states changed (after a snapshot was taken)."""

    @abstractmethod
    def _snapshot_key_group(self, state_name: str, key_group: int) -> pa.Table:
        """The stored rows of one key group: ``snapshot_schema`` of the descriptor given to
        :meth:`_create_state` (so TTL values are still structs)."""

    @abstractmethod
    def _restore_key_group(self, state_name: str, key_group: int, rows: pa.Table) -> None:
        """Load stored rows (as :meth:`_snapshot_key_group` returns them) of one key group."""

    def _cleanup_incrementally(self, state_name: str, purge: Purge, count: int) -> None:
        """Apply ``purge`` to the next ``count`` stored entries of ``state_name``, resuming where
        the previous call stopped; used when :attr:`incremental_ttl_cleanup` is true."""

    def on_snapshot_written(
        self, checkpoint_id: int, written: Mapping[str, Mapping[int, Sequence[str]]]
    ) -> None:
        """The task wrote its snapshot of ``checkpoint_id`` (not yet complete): per state, the
        files of each changed key group (none when it became empty). Backends that keep local
        state between runs record it here."""

    def restore_metrics(self) -> dict[str, int]:
        """How this backend got its state (reported with the task's snapshot); none by default."""
        return {}

    def resume(self, restore_source: RestoreSource | None, scope: Any = None) -> None:
        """Continue in a new run with the state held now, which the runtime has checked to be
        exactly the checkpoint that run restores (see :mod:`statecore.runtime.warm`).

        No key is current and the watermark starts where a restored backend's does; a state
        first registered from now on restores from ``restore_source`` (the new run's). A kept
        state registered again with a descriptor that is not equal (another default, TTL or
        type), or with reduce or aggregate functions that are not certainly the same (compared
        by code, defaults and closures: ``StateDescriptor.same_functions``), raises
        :class:`StateDescriptorConflictError`: the runtime then restores instead, and the new
        function applies from there. ``scope`` is the new run's
        :class:`~statecore.backends.scope.TaskScope` (for backends that keep local state on
        disk; ``None`` outside a job).
        """
        self._restore_source = restore_source
        self._kept = set(self._descriptors)
        self.key_context.clear()
        self.timer_service.reset_watermark()

    def on_kept(self) -> None:
        """The runtime keeps this backend open after its snapshot, for its next run (see
        :mod:`statecore.runtime.warm`); a backend with local state may say so to other
        processes. Nothing by default."""

    def release_requested(self) -> bool:
        """Whether another process waits for a local resource this backend holds (a backend
        kept open between runs is then closed); never, by default."""
        return False

    def close(self) -> None:
        """Release resources (files, handles)."""
