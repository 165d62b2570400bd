"""Point lookups: one key's state at a checkpoint or savepoint, as Flink's queryable state.

A lookup hashes the key as the job does (:func:`~statecore.keygroups.assign_to_key_group`,
Spark's Murmur3), so it knows the one key group that can hold it, and finds that key group's
file(s) of the table version the checkpoint names (and, with changelog checkpoints, its pending
change files) in the version's key-group → file map, listed once and kept for the next lookups.
Of each file it reads the footer (kept too) and the row group(s) whose key statistics can hold
the key (:mod:`statecore.snapshot.row_groups`; files are written sorted by key, in row groups of
about 256 KiB): a few hundred KiB whatever the file's size (a file of up to 1 MiB is read whole,
in one request), and nothing of any other key group. ``bytes_read`` counts every byte read,
footer included. The rows of the key (and namespace; for a ``MapState`` optionally one user
key) come back as the state's value: a value, a list, a dict of map entries, or a
reducing/aggregating state's stored value (the accumulator).

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
from statecore.query.key_rows import LookupResult, key_result, parse_key, resolve_key
from statecore.query.live import LiveUnavailable, live_lookup
from statecore.snapshot.changelog import CHANGES, apply_changes, changes_schema
from statecore.snapshot.files import table_filesystem
from statecore.snapshot.row_groups import read_key_rows
from statecore.snapshot.table import SnapshotTable, TableFile
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
    label = f"{point.job}/{table.operator}/{table.state}"
    files = _files_by_key_group(table, rows_schema, label=label).get(key_group, ())
    read = read_key_rows(table.path, files, key, label=f"snapshot of {label}")
    rows = pa.concat_tables(read.rows) if read.rows else rows_schema.empty_table()
    files_read, bytes_read, groups = read.files_read, read.bytes_read, read.row_groups_read
    changes = _changes_table(point, table)
    if changes is not None:  # changelog checkpoints: the key group's pending changes apply
        change_files = _files_by_key_group(
            changes, changes_schema(rows_schema), label=f"{point.job}/{table.operator}"
        ).get(key_group, ())
        pending = read_key_rows(changes.path, change_files, key, label=f"changes of {label}")
        rows = apply_changes(rows, pending.rows)
        files_read += pending.files_read
        bytes_read += pending.bytes_read
        groups += pending.row_groups_read
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
        files_read=files_read,
        bytes_read=bytes_read,
        row_groups_read=groups,
    )


_VERSIONS: OrderedDict[tuple[str, int, str], dict[int, tuple[TableFile, ...]]] = OrderedDict()
_VERSIONS_FILES = 1 << 18
"""At most this many files are kept in the cached key-group → file maps (about 50 MB), and at
most ``_VERSIONS_SIZE`` versions."""
_VERSIONS_SIZE = 64
_VERSIONS_LOCK = threading.Lock()


def _files_by_key_group(
    table: TableVersion, rows_schema: pa.Schema, *, label: str
) -> dict[int, tuple[TableFile, ...]]:
    """The files of ``table``'s version by key group, listed once for many lookups. A Delta
    version never changes, so the map is kept (the last versions looked up, bounded in
    versions and in files), keyed by the version's commit file as it is now (size and
    modification time): a table deleted and written again at the same path is listed afresh."""
    key = (table.path, table.version, _commit_identity(table.path, table.version))
    with _VERSIONS_LOCK:
        found = _VERSIONS.get(key)
        if found is not None:
            _VERSIONS.move_to_end(key)
            return found
    snapshot = SnapshotTable(table.path, rows_schema, label=label)
    by_key_group: dict[int, list[TableFile]] = {}
    for f in snapshot.files(table.version):  # raises CorruptSnapshotError
        by_key_group.setdefault(f.key_group, []).append(f)
    listed = {kg: tuple(files) for kg, files in by_key_group.items()}
    with _VERSIONS_LOCK:
        _VERSIONS[key] = listed
        while len(_VERSIONS) > 1 and (
            len(_VERSIONS) > _VERSIONS_SIZE
            or sum(_file_count(v) for v in _VERSIONS.values()) > _VERSIONS_FILES
        ):
            _VERSIONS.popitem(last=False)
    return listed


def _file_count(files: dict[int, tuple[TableFile, ...]]) -> int:
    return sum(len(f) for f in files.values())


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
