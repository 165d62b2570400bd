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
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statecore.catalog import Catalog, StateRecord, TableVersion
from statecore.checkpoint.points import RestorePoint, resolve_point
from statecore.config import StatecoreConfig
from statecore.errors import ConfigError, KeyTypeError, UnknownStateError
from statecore.keygroups import KeyGroupRange, assign_to_key_group
from statecore.snapshot.changelog import CHANGES, apply_changes, changes_schema
from statecore.snapshot.files import table_filesystem
from statecore.snapshot.table import SnapshotTable
from statecore.state import VOID_NAMESPACE
from statecore.ttl.config import StateVisibility
from statecore.ttl.storage import TTL_TIMESTAMP

__all__ = ["LookupResult", "lookup", "lookup_at", "parse_key"]

_KEYED = "keyed"


@dataclass(frozen=True)
class LookupResult:
    """What a lookup found for one key of one state, and what it read to find it."""

    job: str
    operator: str
    state: str
    kind: str
    key: Any
    namespace: str
    key_group: int
    point: str
    """The checkpoint or savepoint read (``checkpoint 7 of job 'clicks'``)."""
    found: bool
    value: Any
    expired: int
    """Entries the TTL visibility hid."""
    files_read: int
    bytes_read: int
    state_bytes: int
    """The size of the whole state table at that version, for comparison."""
    live: bool = False
    """The value came from the running task that holds the key (``lookup(..., live=True)``)."""
    live_checkpoint: int | None = None
    """With ``live``: the last checkpoint that task snapshotted; its state is that checkpoint
    and whatever it processed since."""
    uncommitted: bool = False
    """With ``live``: the task was processing a micro-batch, or its last checkpoint had not
    completed yet, so the value may hold updates no checkpoint holds (yet)."""
    fallback: str | None = None
    """Why a live lookup read the latest checkpoint instead (``None``: it did not)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_key(text: str, key_type: pa.DataType, job: str) -> Any:
    """A key given as text (on the command line) as the job's key type."""
    if pa.types.is_integer(key_type):
        try:
            return int(text)
        except ValueError:
            raise KeyTypeError(f"job {job!r} has integer keys; {text!r} is not one") from None
    if pa.types.is_binary(key_type) or pa.types.is_large_binary(key_type):
        return text.encode("utf-8")
    return text


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
        from statecore.query.live import LiveUnavailable, live_lookup

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
    table, record, rows_schema, key, key_group = _resolve(point, state, key, operator)
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
    return _result(
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


def _resolve(
    point: RestorePoint, state: str, key: Any, operator: str | None
) -> tuple[TableVersion, StateRecord, pa.Schema, Any, int]:
    """The state's table, record and row schema at ``point``, the key as the job's key type,
    and its key group (clear errors for an unknown state or a key of another type)."""
    table = _table(point, state, operator)
    record = point.state(table)
    rows_schema = point.rows_schema(table)
    if record is None or rows_schema is None:
        raise UnknownStateError(f"{point.label}: state {state!r} has no registered schema")
    key_type = rows_schema.field("key").type
    if isinstance(key, str) and not pa.types.is_string(key_type):
        key = parse_key(key, key_type, point.job)
    _check_key(key, key_type, point.job, state)
    return table, record, rows_schema, key, assign_to_key_group(key, point.max_parallelism)


def _result(
    point: RestorePoint,
    table: TableVersion,
    record: StateRecord,
    rows: pa.Table,
    key: Any,
    key_group: int,
    *,
    namespace: str,
    user_key: Any,
    now_ms: int | None,
    point_label: str,
    **read: Any,
) -> LookupResult:
    """The lookup's result from the key group's snapshot rows (wherever they were read):
    the rows of ``key`` in ``namespace`` (one ``user_key`` of a map) as the state's value.
    ``read`` holds what it read (``files_read``, ``bytes_read``) and how (the live fields)."""
    mask = pc.and_(pc.equal(rows.column("key"), key), pc.equal(rows.column("namespace"), namespace))
    if user_key is not None:
        if "user_key" not in rows.column_names:
            raise ConfigError(
                f"{point.label}: state {table.state!r} is a {record.kind} state, no map"
            )
        mask = pc.and_(mask, pc.equal(rows.column("user_key"), user_key))
    value, found, expired = _value(record.kind, rows.filter(mask), record.ttl, now_ms)
    return LookupResult(
        job=point.job,
        operator=table.operator,
        state=table.state,
        kind=record.kind,
        key=key,
        namespace=namespace,
        key_group=key_group,
        point=point_label,
        found=found,
        value=value,
        expired=expired,
        state_bytes=table.bytes,
        **read,
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


def _table(point: RestorePoint, state: str, operator: str | None) -> TableVersion:
    tables = [
        t
        for t in point.tables
        if t.table_kind == _KEYED and t.state == state and operator in (None, t.operator)
    ]
    if not tables:
        known = sorted({t.state for t in point.tables if t.table_kind == _KEYED})
        raise UnknownStateError(
            f"{point.label} has no keyed state {state!r}"
            + (f" of operator {operator!r}" if operator else "")
            + f"; its keyed states: {known}"
        )
    if len(tables) > 1:
        raise ConfigError(
            f"{point.label}: operators {sorted(t.operator for t in tables)} each have a state "
            f"{state!r}; name the operator"
        )
    return tables[0]


def _changes_table(point: RestorePoint, table: TableVersion) -> TableVersion | None:
    """The changes table of ``table``'s state in ``point`` (changelog checkpoints), if any."""
    for t in point.tables:
        if t.table_kind == CHANGES and (t.operator, t.state) == (table.operator, table.state):
            return t
    return None


def _check_key(key: Any, key_type: pa.DataType, job: str, state: str) -> None:
    expected: type | tuple[type, ...]
    if pa.types.is_integer(key_type):
        expected = int
    elif pa.types.is_binary(key_type) or pa.types.is_large_binary(key_type):
        expected = bytes
    else:
        expected = str
    if not isinstance(key, expected) or isinstance(key, bool):
        raise KeyTypeError(
            f"job {job!r}, state {state!r}: key {key!r} is not of the job's key type {key_type}"
        )


def _value(
    kind: str, rows: pa.Table, ttl: dict[str, Any] | None, now_ms: int | None
) -> tuple[Any, bool, int]:
    """The state's value from its matching rows: ``(value, found, entries hidden by TTL)``."""
    values = rows.column("value").to_pylist() if "value" in rows.column_names else []
    stamps = rows.column(TTL_TIMESTAMP).to_pylist() if TTL_TIMESTAMP in rows.column_names else None
    limit = _expiry_limit(ttl, now_ms)
    expired = 0
    if kind == "list":
        out: list[Any] = []
        for i, elements in enumerate(values):
            for j, element in enumerate(elements or ()):
                if stamps is not None and limit is not None and stamps[i][j] <= limit:
                    expired += 1
                else:
                    out.append(element)
        return out, bool(out), expired
    alive = [
        i for i in range(rows.num_rows) if stamps is None or limit is None or stamps[i] > limit
    ]
    expired = rows.num_rows - len(alive)
    if kind == "map":
        user_keys = rows.column("user_key").to_pylist()
        entries = {user_keys[i]: values[i] for i in alive}
        return entries, bool(entries), expired
    if not alive:
        return None, False, expired
    return values[alive[0]], True, expired


def _expiry_limit(ttl: dict[str, Any] | None, now_ms: int | None) -> int | None:
    """Entries last accessed at or before this are expired and hidden (``None``: none are)."""
    if not ttl or "ttl_ms" not in ttl:
        return None
    visibility = ttl.get("visibility", StateVisibility.NEVER_RETURN_EXPIRED.value)
    if visibility != StateVisibility.NEVER_RETURN_EXPIRED.value:
        return None
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return now - int(ttl["ttl_ms"])
