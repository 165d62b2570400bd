"""``RocksDBKeyedStateBackend``: keyed state in an embedded RocksDB instance on local disk.

One column family per registered state, keys laid out as ``[key group][key][namespace]``
(:mod:`statecore.backends.rocksdb.keys`), values in their typed binary form
(:mod:`statecore.backends.rocksdb.column`). Only the block cache and the memtables are in memory
(:class:`RocksDBOptions`), so state can be far larger than the worker's memory.

Restores are bulk loads of SST files (:mod:`statecore.backends.rocksdb.bulk`); a task whose
local instance is already at the checkpoint it restores reopens it instead
(:mod:`statecore.backends.rocksdb.local`). Expired TTL entries are handled without compaction
filters (:mod:`statecore.backends.rocksdb.ttl`). Value states of immutable scalars are served
by a bounded write-back cache (:mod:`statecore.backends.rocksdb.cache`), flushed before anything
else reads their column family.
"""

from __future__ import annotations

import logging
import os
import struct
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import pyarrow as pa
import rocksdict

from statecore.backends.base import (
    BatchKeySetter,
    KeyedStateBackend,
    Purge,
    RestoreSource,
    snapshot_schema,
)
from statecore.backends.rocksdb.bulk import ingest_key_groups
from statecore.backends.rocksdb.cache import ValueCache, cached_class
from statecore.backends.rocksdb.column import StateColumn
from statecore.backends.rocksdb.keys import KeyLayout, key_group_bounds, prefix_successor
from statecore.backends.rocksdb.local import LocalInstance, LocalManifest
from statecore.backends.rocksdb.options import RocksDBOptions
from statecore.backends.rocksdb.states import STATE_CLASSES, RocksDBCachedValueState
from statecore.backends.rocksdb.ttl import CleanupCursor
from statecore.backends.scope import TaskScope
from statecore.descriptors import StateDescriptor, StateKind
from statecore.errors import CorruptSnapshotError, KeyTypeError, StateAccessError
from statecore.keygroups import Key, KeyGroupRange, assign_to_key_group
from statecore.state import VOID_NAMESPACE, State
from statecore.ttl.time import TtlTimeProvider
from statecore.types import TypeInfo, schema_to_text

__all__ = ["RocksDBKeyedStateBackend"]

log = logging.getLogger(__name__)

_KEY_CACHE_LIMIT = 1 << 17  # keys whose key group and prefix are remembered
_CF_PREFIX = "state."


def _cf_name(state: str) -> str:
    return _CF_PREFIX + state


class _Resources:
    """The open database, its column families and the local directory; closed exactly once."""

    def __init__(self, db: rocksdict.Rdict, local: LocalInstance) -> None:
        self.db = db
        self.local = local
        self.cfs: dict[str, rocksdict.Rdict] = {}
        self.handles: dict[str, Any] = {}  # column family handles keep the database open
        self.closed = False

    def close(self, manifest: LocalManifest | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if manifest is not None:
                for cf in self.cfs.values():
                    cf.flush()
            for cf in self.cfs.values():
                cf.close()
            self.cfs.clear()
            self.handles.clear()
            self.db.close()
            self.local.withdraw_kept()
            if manifest is not None:
                self.local.publish(manifest)
        finally:
            self.local.release()


class RocksDBKeyedStateBackend(KeyedStateBackend):
    """Keyed state in embedded RocksDB: bounded memory, state larger than the worker's RAM.

    >>> from statecore.descriptors import ValueStateDescriptor
    >>> backend = RocksDBKeyedStateBackend(
    ...     key_type=TypeInfo.of(str), key_group_range=KeyGroupRange(0, 127), max_parallelism=128)
    >>> total = backend.get_partitioned_state(ValueStateDescriptor("total", int, default=0))
    >>> backend.set_current_key("user-1")
    >>> total.update(total.value() + 5)
    >>> total.value(), sorted(backend.changed_key_groups("total"))
    (5, [86])
    >>> backend.close()
    """

    incremental_ttl_cleanup = True

    def __init__(
        self,
        *,
        key_type: TypeInfo,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        restore_source: RestoreSource | None = None,
        ttl_time_provider: TtlTimeProvider | None = None,
        options: RocksDBOptions | None = None,
        scope: TaskScope | None = None,
    ) -> None:
        super().__init__(
            key_type=key_type,
            key_group_range=key_group_range,
            max_parallelism=max_parallelism,
            restore_source=restore_source,
            ttl_time_provider=ttl_time_provider,
        )
        self.options = options or RocksDBOptions()
        self.scope = scope
        self._layout = KeyLayout(key_type.arrow)
        self._make_prefix = self._layout.prefix_function()
        self._first_kg, self._last_kg = key_group_range.start, key_group_range.end
        self._key_cache: dict[Any, tuple[int, bytes]] = {}
        self._batch_listeners: list[Callable[[], None]] = [self._encode_current_prefix]
        """What a batch's loop calls per record (:meth:`batch_key_setter`): the prefix encoder,
        then the key listeners."""
        self._columns: dict[str, StateColumn] = {}
        self._pending: LocalManifest | None = None
        self._families: set[str] = set()
        self._materialized: set[str] = set()  # column families kept from a reused instance
        self._complete: set[str] = set()  # states at the restored checkpoint for all key groups
        self._missing: list[int] = []
        self._ingested: set[int] = set()
        self._cleanup: dict[str, CleanupCursor] = {}
        self._metrics: dict[str, int] = {
            "reused_key_groups": 0,
            "clipped_key_groups": 0,
            "ingested_key_groups": 0,
            "ingested_rows": 0,
        }
        self._db_options = self.options.to_options()
        self._write_options = self.options.to_write_options()
        local = self._claim_directory()
        try:
            db = self._open(local)
        except BaseException:
            local.release()
            raise
        self._resources = _Resources(db, local)
        self._finalizer = weakref.finalize(self, self._resources.close)
        try:
            if local.reused is not None:
                self._reuse(local.reused)
        except BaseException:
            self.close()
            raise

    # -- the local instance ----------------------------------------------------------------
    def _claim_directory(self) -> LocalInstance:
        scope = self.scope
        if scope is None:
            return LocalInstance.temporary(self.options.local_directory)
        root = self.options.local_directory or os.path.join(scope.home, "rocksdb")
        return LocalInstance.claim(
            root,
            job=scope.job,
            operator=scope.operator,
            key_groups=self.key_group_range,
            max_parallelism=self.max_parallelism,
            restored_checkpoint_id=scope.restored_checkpoint_id,
            restored_files=scope.restored_files,
        )

    def _open(self, local: LocalInstance) -> rocksdict.Rdict:
        path = str(local.db_path)
        families: dict[str, rocksdict.Options] = {}
        if local.reused is not None:
            families = {
                name: self._db_options
                for name in rocksdict.Rdict.list_cf(path)
                if name != "default"
            }
        db = rocksdict.Rdict(path, self._db_options, column_families=families or None)
        self._families = set(families)
        db.set_write_options(self._write_options)
        return db

    def _reuse(self, manifest: LocalManifest) -> None:
        """Keep the key groups both ranges own, clip the others, note the ones to ingest."""
        mine, theirs = self.key_group_range, manifest.key_groups
        shared = theirs.intersection(mine)
        db = self._resources.db
        families = sorted(n for n in self._families if n.startswith(_CF_PREFIX))
        self._materialized = {n[len(_CF_PREFIX) :] for n in families} & set(manifest.files)
        clip = [
            r
            for r in (
                KeyGroupRange(theirs.start, mine.start - 1),
                KeyGroupRange(mine.end + 1, theirs.end),
            )
            if len(r)
        ]
        for name in families:
            if name[len(_CF_PREFIX) :] not in self._materialized:
                db.drop_column_family(name)
                self._families.discard(name)
                continue
            if clip:
                cf = db.get_column_family(name)
                try:
                    for r in clip:
                        lower, upper = key_group_bounds(r.start, r.end)
                        cf.delete_range(lower, upper)
                finally:
                    cf.close()
        self._missing = [kg for kg in mine if kg not in theirs]
        if not self._missing:
            self._complete = set(self._materialized)
        self._metrics["reused_key_groups"] = len(shared)
        self._metrics["clipped_key_groups"] = sum(len(r) for r in clip)
        log.info(
            "reused local RocksDB state at checkpoint %s for key groups %s..%s "
            "(%d clipped, %d to ingest): %s",
            manifest.checkpoint_id,
            mine.start,
            mine.end,
            self._metrics["clipped_key_groups"],
            len(self._missing),
            self._resources.local.path,
        )

    def restore_metrics(self) -> dict[str, int]:
        """``reused_key_groups`` (from the local instance), ``clipped_key_groups``,
        ``ingested_key_groups`` and ``ingested_rows`` (bulk-loaded from the snapshot)."""
        return dict(self._metrics)

    def resume(self, restore_source: RestoreSource | None, scope: Any = None) -> None:
        """Continue in a new run (see :meth:`KeyedStateBackend.resume`): the database stays
        open, every state it holds is complete, and the manifest of the next snapshot lists
        the new run's restored files for the key groups it leaves unchanged."""
        super().resume(restore_source, scope)
        if self._resources.closed:
            raise StateAccessError("the RocksDB backend is closed; it cannot be resumed")
        self._resources.local.withdraw_kept()
        self.scope = scope if isinstance(scope, TaskScope) else None
        self._pending = None
        self._missing = []
        self._ingested = set()
        self._metrics = dict.fromkeys(self._metrics, 0)

    def on_kept(self) -> None:
        """Kept open after a snapshot: tell other processes which checkpoint the instance is
        at (a kept manifest), so a task elsewhere that would reuse it asks for it."""
        manifest = self._pending
        if manifest is not None and not any(c.dirty for c in self._columns.values()):
            self._resources.local.publish_kept(manifest)

    def release_requested(self) -> bool:
        """Whether a task of another process waits for this instance's local directory."""
        return not self._resources.closed and self._resources.local.release_requested()

    @property
    def directory(self) -> str:
        return str(self._resources.local.path)

    # -- the current key -------------------------------------------------------------------
    def set_current_key(self, key: Key, key_group: int | None = None) -> None:
        if key_group is None:
            cached = self._key_cache.get(key)
            if cached is None:
                cached = self._new_key(key)
            context = self.key_context
            context.key = key
            context.key_group, context.prefix = cached
        else:
            if not self._first_kg <= key_group <= self._last_kg:
                super().set_current_key(key, key_group)  # raises KeyGroupOutOfRangeError
            try:
                prefix = self._make_prefix(key, key_group)
            except (AttributeError, TypeError, struct.error, OverflowError) as exc:
                raise self._key_type_error(key) from exc
            context = self.key_context
            context.key = key
            context.key_group = key_group
            context.prefix = prefix
        if self._key_listeners:
            for listener in self._key_listeners:
                listener()

    def batch_key_setter(self) -> BatchKeySetter:
        """The loop assigns the key and its group; the first listener encodes its prefix."""
        return BatchKeySetter(self.key_context, self._batch_listeners)

    def prefixed_key_setter(
        self, keys: pa.Array, key_groups: pa.Array
    ) -> tuple[BatchKeySetter, list[bytes]] | None:
        """String keys: the batch's prefixes built as one column
        (:meth:`KeyLayout.prefixes <statecore.backends.rocksdb.keys.KeyLayout.prefixes>`),
        and the key listeners without the per-record prefix encoder."""
        prefixes = self._layout.prefixes(keys, key_groups)
        if prefixes is None:
            return None
        return BatchKeySetter(self.key_context, self._key_listeners), prefixes

    def _add_key_listener(self, listener: Callable[[], None]) -> None:
        super()._add_key_listener(listener)
        self._batch_listeners.append(listener)

    def _encode_current_prefix(self) -> None:
        """The current key's prefix, once the loop assigned the key and its checked group
        (a key of the wrong type leaves no key current)."""
        context = self.key_context
        try:
            context.prefix = self._make_prefix(context.key, context.key_group)  # type: ignore[arg-type]
        except (AttributeError, TypeError, struct.error, OverflowError) as exc:
            context.key_group = None
            raise self._key_type_error(context.key) from exc

    def _new_key(self, key: Key) -> tuple[int, bytes]:
        """Key group and prefix of a key not seen recently (then remembered)."""
        key_group = assign_to_key_group(key, self.max_parallelism)
        if not self._first_kg <= key_group <= self._last_kg:
            super().set_current_key(key, key_group)  # raises KeyGroupOutOfRangeError
        try:
            prefix = self._make_prefix(key, key_group)
        except (AttributeError, TypeError, struct.error, OverflowError) as exc:
            raise self._key_type_error(key) from exc
        if len(self._key_cache) >= _KEY_CACHE_LIMIT:
            self._key_cache.clear()
        entry = self._key_cache[key] = (key_group, prefix)
        return entry

    def _key_type_error(self, key: Any) -> KeyTypeError:
        return KeyTypeError(
            f"key {key!r} of type {type(key).__name__} does not match the "
            f"backend's key type {self.key_type.arrow}"
        )

    # -- states ----------------------------------------------------------------------------
    def _create_state(self, descriptor: StateDescriptor) -> State:
        resources = self._resources
        if resources.closed:
            raise StateAccessError(f"state {descriptor.name!r}: the RocksDB backend is closed")
        name = _cf_name(descriptor.name)
        reused = resources.local.reused
        if reused is not None and reused.schemas.get(descriptor.name) != self._schema(descriptor):
            self._materialized.discard(descriptor.name)  # stored in another form: restore anew
        if descriptor.name in self._materialized:
            cf = resources.db.get_column_family(name)
        else:
            if name in self._families:
                resources.db.drop_column_family(name)
            cf = resources.db.create_column_family(name, self._db_options)
            self._families.add(name)
        cf.set_write_options(self._write_options)
        resources.cfs[descriptor.name] = cf
        column = self._columns[descriptor.name] = StateColumn(
            descriptor, cf, self._layout, self._new_dirty_set()
        )
        value_class = cached_class(descriptor.value_info)
        capacity = self.options.value_cache_entries
        if descriptor.kind is StateKind.VALUE and value_class is not None and capacity:
            column.cache = ValueCache(
                capacity=capacity,
                value_class=value_class,
                handle=partial(self._cf_handle, descriptor.name),
                write=self._write,
            )
            return RocksDBCachedValueState(self, column)
        return STATE_CLASSES[descriptor.kind](self, column)

    def _schema(self, descriptor: StateDescriptor) -> str:
        return schema_to_text(snapshot_schema(self.key_type, descriptor))

    def _restore_state(self, state_name: str, chunks: Iterable[tuple[int, pa.Table]]) -> None:
        """Bulk-load the snapshot; of a reused instance, only the key groups it lacks."""
        if state_name in self._materialized:
            scope = self.scope
            if self._missing and scope is not None and scope.restore_source_for is not None:
                source = scope.restore_source_for(self._missing)
                self._ingest(state_name, source(self.descriptor(state_name)))
        else:
            self._ingest(state_name, chunks)
        self._complete.add(state_name)

    def _ingest(
        self, state_name: str, chunks: Iterable[tuple[int, pa.Table]], *, stored: bool = False
    ) -> None:
        column = self._column(state_name)
        if column.cache is not None:
            column.cache.clear()  # the loaded entries replace what the cache holds
        if not stored:
            chunks = ((kg, self._stored_rows(state_name, rows)) for kg, rows in chunks)
        count, key_groups = ingest_key_groups(
            column.cf,
            column,
            chunks,
            directory=self._resources.local.ingest_path,
            options=self._db_options,
        )
        self._ingested.update(key_groups)
        self._metrics["ingested_rows"] += count
        self._metrics["ingested_key_groups"] = len(self._ingested)

    def _column(self, state_name: str) -> StateColumn:
        self.descriptor(state_name)  # raises UnknownStateError
        return self._columns[state_name]

    def _cf_handle(self, state_name: str) -> Any:
        handles = self._resources.handles
        handle = handles.get(state_name)
        if handle is None:
            handle = handles[state_name] = self._resources.db.get_column_family_handle(
                _cf_name(state_name)
            )
        return handle

    def _write(self, batch: rocksdict.WriteBatch) -> None:
        self._resources.db.write(batch, self._write_options)  # no WAL, as for single writes

    def flush(self) -> None:
        """Write every state's cached pending values to RocksDB (done before snapshots, scans
        and ``close`` anyway)."""
        for column in self._columns.values():
            if column.cache is not None:
                column.cache.flush()

    def _flushed(self, state_name: str) -> StateColumn:
        """The column of ``state_name``, its cached writes flushed (before RocksDB is read other
        than by a point get)."""
        column = self._column(state_name)
        if column.cache is not None:
            column.cache.flush()
        return column

    # -- TTL cleanup -----------------------------------------------------------------------
    def _cleanup_incrementally(self, state_name: str, purge: Purge, count: int) -> None:
        cursor = self._cleanup.get(state_name)
        if cursor is None:
            cursor = self._cleanup[state_name] = CleanupCursor(self.key_group_range)
        cursor.step(self._flushed(state_name), purge, count)

    def cleanup_expired(self, max_entries: int | None = None) -> int:
        """Remove expired entries of every TTL state, visiting at most ``max_entries`` per state
        (``RocksDBOptions.ttl_cleanup_batch`` by default) from where the last step stopped;
        the number of entries removed or rewritten."""
        budget = max_entries or self.options.ttl_cleanup_batch
        now = self.ttl_time_provider.current_timestamp()
        changed = 0
        for name, storage in self._ttl.items():
            cursor = self._cleanup.get(name)
            if cursor is None:
                cursor = self._cleanup[name] = CleanupCursor(self.key_group_range)
            changed += cursor.step(self._flushed(name), storage.purge(now), budget)[1]
        return changed

    # -- iteration -------------------------------------------------------------------------
    def _scan(
        self, column: StateColumn, first: int, last: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """Every entry of key groups ``first..last``, read into a list (no open iterator)."""
        if column.cache is not None:
            column.cache.flush()
        lower, upper = key_group_bounds(first, last)
        read = rocksdict.ReadOptions()
        read.set_iterate_upper_bound(upper)
        return list(column.cf.items(from_key=lower, read_opt=read))  # type: ignore[arg-type]

    def keys(self, state_name: str, namespace: str = VOID_NAMESPACE) -> Iterator[Any]:
        column = self._column(state_name)
        split = self._layout.split
        for kg in self.key_group_range:
            found = []
            last = None
            for db_key, _ in self._scan(column, kg):
                key, ns, end = split(db_key)
                if ns == namespace and db_key[:end] != last:  # map entries: one key, many rows
                    found.append(key)
                    last = db_key[:end]
            yield from found

    # -- snapshots -------------------------------------------------------------------------
    def changed_key_groups(self, state_name: str) -> set[int]:
        return set(self._column(state_name).dirty)

    def _dirty_set(self, state_name: str) -> set[int]:
        return self._column(state_name).dirty

    def mark_snapshotted(self) -> None:
        for column in self._columns.values():
            column.dirty.clear()

    def _snapshot_key_group(self, state_name: str, key_group: int) -> pa.Table:
        column = self._column(state_name)
        to_row = column.to_row
        rows = [to_row(k, v) for k, v in self._scan(column, key_group)]
        schema = snapshot_schema(self.key_type, column.descriptor)
        try:
            return pa.Table.from_pydict(column.snapshot_columns(rows), schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise CorruptSnapshotError(
                f"state {state_name!r}, key group {key_group}: values do not match the declared "
                f"type {column.descriptor.value_info.arrow}: {exc}"
            ) from exc

    def _snapshot_keys(self, state_name: str, key_group: int, keys: Collection[Any]) -> pa.Table:
        """One prefix scan per key: ``[key group][key]`` is self-delimiting."""
        column = self._flushed(state_name)
        to_row = column.to_row
        read = rocksdict.ReadOptions()
        rows: list[tuple[Any, str, Any, Any]] = []
        for key in keys:
            prefix = self._layout.prefix(key, key_group)
            read.set_iterate_upper_bound(prefix_successor(prefix))
            items = column.cf.items(from_key=prefix, read_opt=read)
            rows.extend(to_row(k, v) for k, v in items)  # type: ignore[arg-type]
            del items  # release the iterator (it keeps the database open)
        schema = snapshot_schema(self.key_type, column.descriptor)
        try:
            return pa.Table.from_pydict(column.snapshot_columns(rows), schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise CorruptSnapshotError(
                f"state {state_name!r}, key group {key_group}: values do not match the declared "
                f"type {column.descriptor.value_info.arrow}: {exc}"
            ) from exc

    def _restore_key_group(self, state_name: str, key_group: int, rows: pa.Table) -> None:
        self._ingest(state_name, [(key_group, rows)], stored=True)

    def on_snapshot_written(
        self, checkpoint_id: int, written: Mapping[str, Mapping[int, Sequence[str]]]
    ) -> None:
        """Remember the files of checkpoint ``checkpoint_id``; published on :meth:`close`."""
        scope = self.scope
        if scope is None:
            return
        self.flush()
        mine = self.key_group_range
        reused = self._resources.local.reused
        files: dict[str, dict[int, tuple[str, ...]]] = {}
        for state in self._complete:
            by_kg = {
                kg: tuple(p) for kg, p in scope.restored_files.get(state, {}).items() if kg in mine
            }
            for kg, paths in written.get(state, {}).items():
                by_kg[kg] = tuple(paths)
            files[state] = {kg: p for kg, p in by_kg.items() if p}
        schemas = {
            state: self._schema(self._columns[state].descriptor)
            for state in files
            if state in self._columns
        }
        if reused is not None:
            schemas = {**{s: t for s, t in reused.schemas.items() if s in files}, **schemas}
        self._pending = LocalManifest(
            job=scope.job,
            operator=scope.operator,
            max_parallelism=self.max_parallelism,
            key_groups=mine,
            checkpoint_id=checkpoint_id,
            files=files,
            schemas=schemas,
        )

    def close(self) -> None:
        """Close the database; publish the local instance when a snapshot was its last write."""
        if self._resources.closed:
            return
        try:
            self.flush()
        except BaseException:
            self._finalizer.detach()
            self.key_context.clear()  # a state used after close fails: no current key
            self._resources.close()
            raise
        finally:
            for column in self._columns.values():
                if column.cache is not None:
                    column.cache.drop()
        manifest = self._pending
        if manifest is not None and any(c.dirty for c in self._columns.values()):
            manifest = None  # written after the snapshot: not the checkpoint's state
        self._finalizer.detach()
        self.key_context.clear()  # a state used after close fails: no current key
        self._resources.close(manifest)
