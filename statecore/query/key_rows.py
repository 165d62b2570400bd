"""One key's value from the snapshot rows of its key group, wherever they were read.

A checkpoint lookup (:mod:`statecore.query.lookup`) reads the rows from the key group's Delta
files; a live lookup (:mod:`statecore.query.live`) asks the running task for them. Both first
:func:`resolve_key` (the state's table at the checkpoint, the key as the job's key type, its key
group) and then build the answer with :func:`key_result` (the rows of the key, TTL visibility
respected, as the state's value).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from statecore.catalog import StateRecord, TableVersion
from statecore.checkpoint.points import RestorePoint
from statecore.errors import ConfigError, KeyTypeError, UnknownStateError
from statecore.keygroups import assign_to_key_group
from statecore.ttl.config import StateVisibility
from statecore.ttl.storage import TTL_TIMESTAMP

__all__ = ["LookupResult", "key_result", "parse_key", "resolve_key"]

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
    row_groups_read: int = 0
    """Parquet row groups read: those whose key statistics do not exclude the key (a file small
    enough to read whole counts all of its row groups)."""
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


def resolve_key(
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


def key_result(
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
