"""Point lookups: one key's state at a checkpoint or savepoint, as Flink's queryable state.

A lookup hashes the key as the job does (:func:`~statecore.keygroups.assign_to_key_group`,
Spark's Murmur3), so it knows the one key group that can hold it, and reads only that key
group's file(s) of the table version the checkpoint names (and, with changelog checkpoints, that
key group's pending change files, applied): no other key group is opened, which bounds what it
reads to about ``1/max_parallelism`` of the state. The rows of the key (and
namespace; for a ``MapState`` optionally one user key) come back as the state's value: a value, a
list, a dict of map entries, or a reducing/aggregating state's stored value (the accumulator).

TTL visibility is respected as the state's reads would respect it: under
``never_return_expired`` an entry whose last access is ``ttl`` or more before ``now`` is hidden
(and counted in ``expired``), under ``return_expired_if_not_cleaned_up`` it is returned.
Values stored ``PICKLED`` come back as their bytes: a lookup never unpickles.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import pyarrow as pa

from statecore.catalog import Catalog, TableVersion
from statecore.checkpoint.points import RestorePoint, resolve_point
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError
from statecore.keygroups import KeyGroupRange
from statecore.query.key_rows import LookupResult, key_result, parse_key, resolve_key
from statecore.query.live import LiveUnavailable, live_lookup
from statecore.snapshot.changelog import CHANGES, apply_changes, changes_schema
from statecore.snapshot.files import table_filesystem
from statecore.snapshot.table import SnapshotTable
from statecore.state import VOID_NAMESPACE

__all__ = ["LookupResult", "lookup", "lookup_at", "parse_key"]


def lookup(
    job: str,
    state: str,
    key: Any,
    *,
    namespace: str = VOID_NAMESPACE,
    user_key: Any = None,
    checkpoint: int | None = None,
    savepoint: str | None = None,
    operator: str | None = None,
    now_ms: int | None = None,
    config: StatecoreConfig | None = None,
    live: bool = False,
) -> LookupResult:
    """The value of ``key`` in ``state`` of ``job``: at the latest checkpoint, at ``checkpoint``,
    or at ``savepoint`` (a name in the catalog or a folder). ``key`` may be text (it is parsed as
    the job's key type); ``user_key`` narrows a ``MapState`` to one entry; ``operator`` is needed
    only when two operators have a state of that name; ``now_ms`` is the processing time TTL is
    judged against (default: now).

    With ``live`` the running task that holds the key answers, with its state as it is now
    (a stream run with ``live_lookups=True``, see :mod:`statecore.query.live`); when none can,
    the latest checkpoint does, and ``fallback`` says why."""
    if checkpoint is not None and savepoint is not None:
        raise ConfigError("give a checkpoint or a savepoint to look up, not both")
    if live and (checkpoint is not None or savepoint is not None):
        raise ConfigError("a live lookup reads the running job's state, not a checkpoint")
    config = config or StatecoreConfig.resolve()
    with Catalog.connect(config.catalog_url) as catalog:
        point = resolve_point(catalog, job, savepoint if savepoint is not None else checkpoint)
        if live:
            token, endpoints = catalog.live_token(job), catalog.live_endpoints(job)
    fallback = None
    if live:
        try:
            return live_lookup(
                point,
                endpoints,
                token,
                state,
                key,
                namespace=namespace,
                user_key=user_key,
                operator=operator,
                now_ms=now_ms,
            )
        except LiveUnavailable as exc:
            fallback = str(exc)
    result = lookup_at(
        point,
        state,
        key,
        namespace=namespace,
        user_key=user_key,
        operator=operator,
        now_ms=now_ms,
    )
    return result if fallback is None else replace(result, fallback=fallback)


def lookup_at(
    point: RestorePoint,
    state: str,
    key: Any,
    *,
    namespace: str = VOID_NAMESPACE,
    user_key: Any = None,
    operator: str | None = None,
    now_ms: int | None = None,
) -> LookupResult:
    """:func:`lookup` at a resolved checkpoint or savepoint."""
    table, record, rows_schema, key, key_group = resolve_key(point, state, key, operator)
    snapshot = _opened(table, rows_schema, label=f"{point.job}/{table.operator}/{table.state}")
    files = snapshot.files(table.version, KeyGroupRange(key_group, key_group))
    parts = [rows for _, rows in snapshot.read_files(files)]
    rows = pa.concat_tables(parts) if parts else rows_schema.empty_table()
    changes = _changes_table(point, table)
    if changes is not None:  # changelog checkpoints: the key group's pending changes apply
        pending = _opened(
            changes, changes_schema(rows_schema), label=f"{point.job}/{table.operator}"
        )
        change_files = pending.files(changes.version, KeyGroupRange(key_group, key_group))
        rows = apply_changes(rows, [r for _, r in pending.read_files(change_files)])
        files += change_files
    return key_result(
        point,
        table,
        record,
        rows,
        key,
        key_group,
        namespace=namespace,
        user_key=user_key,
        now_ms=now_ms,
        point_label=point.label,
        files_read=len(files),
        bytes_read=sum(f.size for f in files),
    )


_OPENED: OrderedDict[tuple[str, int, str], SnapshotTable] = OrderedDict()
_OPENED_SIZE = 64
_OPENED_LOCK = threading.Lock()


def _opened(table: TableVersion, rows_schema: pa.Schema, *, label: str) -> SnapshotTable:
    """The snapshot table at ``table``'s version, opened once for many lookups. A Delta
    version never changes, so the opened table is kept (the last ``_OPENED_SIZE``), keyed by
    the version's commit file as it is now (size and modification time): a table deleted and
    written again at the same path is opened afresh."""
    key = (table.path, table.version, _commit_identity(table.path, table.version))
    with _OPENED_LOCK:
        found = _OPENED.get(key)
        if found is not None:
            _OPENED.move_to_end(key)
            return found
    opened = SnapshotTable(table.path, rows_schema, label=label)
    opened.files(table.version)  # opens the version (raises CorruptSnapshotError)
    with _OPENED_LOCK:
        _OPENED[key] = opened
        while len(_OPENED) > _OPENED_SIZE:
            _OPENED.popitem(last=False)
    return opened


def _commit_identity(path: str, version: int) -> str:
    """Size and modification time of the commit file of ``version`` (empty when unknown)."""
    fs, root = table_filesystem(path)
    try:
        info = fs.get_file_info(f"{root}/_delta_log/{version:020d}.json")
    except (OSError, ValueError):
        return ""
    return f"{info.size}:{info.mtime_ns}"


def _changes_table(point: RestorePoint, table: TableVersion) -> TableVersion | None:
    """The changes table of ``table``'s state in ``point`` (changelog checkpoints), if any."""
    for t in point.tables:
        if t.table_kind == CHANGES and (t.operator, t.state) == (table.operator, table.state):
            return t
    return None
