"""State schema compatibility on restore: the rules, and the migration of stored rows.

A restored state's stored schema is compared with the schema its descriptor produces now
(Flink's ``TypeSerializerSchemaCompatibility``):

- **compatible as is**: the same schema;
- **compatible after migration**, done transparently on restore: a struct gains a nullable field
  or loses one (dropped, as Flink's POJO serializer does), an integer widens (``int8`` →
  ``int16`` → ``int32`` → ``int64``, unsigned to a wider integer), ``float32`` → ``float64``, a
  non-nullable field becomes nullable, TTL is turned on (the ``ttl_timestamp`` column appears;
  entries start their time to live at restore) or off (the column is dropped) — also inside lists
  and maps;
- **incompatible**: the key type changed, an integer or float narrows, any other type change
  (e.g. ``int64`` → ``string``), a new non-nullable field, a nullable field that becomes
  non-nullable, another state kind or operator-state mode. Restore stops with
  :class:`~statecore.errors.StateMigrationError` before any record is processed.

>>> import pyarrow as pa
>>> old = pa.schema([("key", pa.string()), ("value", pa.int32())])
>>> check_schema(old, pa.schema([("key", pa.string()), ("value", pa.int64())])).compatibility
<Compatibility.COMPATIBLE_AFTER_MIGRATION: 'compatible_after_migration'>
>>> check_schema(old, pa.schema([("key", pa.int64()), ("value", pa.int32())])).reason
'the key type changed from string to int64'
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from statecore.errors import StateMigrationError
from statecore.types import is_pickled

__all__ = ["Compatibility", "SchemaCheck", "check_schema", "migrate_rows"]

TTL_TIMESTAMP = "ttl_timestamp"
_KEY = "key"


class Compatibility(enum.Enum):
    COMPATIBLE_AS_IS = "compatible_as_is"
    COMPATIBLE_AFTER_MIGRATION = "compatible_after_migration"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True)
class SchemaCheck:
    compatibility: Compatibility
    reason: str = ""

    @property
    def is_incompatible(self) -> bool:
        return self.compatibility is Compatibility.INCOMPATIBLE

    @property
    def needs_migration(self) -> bool:
        return self.compatibility is Compatibility.COMPATIBLE_AFTER_MIGRATION


_AS_IS = SchemaCheck(Compatibility.COMPATIBLE_AS_IS)


def _migration(reason: str) -> SchemaCheck:
    return SchemaCheck(Compatibility.COMPATIBLE_AFTER_MIGRATION, reason)


def _incompatible(reason: str) -> SchemaCheck:
    return SchemaCheck(Compatibility.INCOMPATIBLE, reason)


def _worst(checks: list[SchemaCheck]) -> SchemaCheck:
    for wanted in (Compatibility.INCOMPATIBLE, Compatibility.COMPATIBLE_AFTER_MIGRATION):
        found = [c.reason for c in checks if c.compatibility is wanted]
        if found:
            return SchemaCheck(wanted, "; ".join(found))
    return _AS_IS


def _widens(old: pa.DataType, new: pa.DataType) -> bool:
    """A lossless widening: a wider integer (signed into signed, unsigned into either), or a
    wider float."""
    if pa.types.is_integer(old) and pa.types.is_integer(new):
        if pa.types.is_signed_integer(old) and pa.types.is_unsigned_integer(new):
            return False
        return bool(new.bit_width > old.bit_width)
    return bool(
        pa.types.is_floating(old) and pa.types.is_floating(new) and new.bit_width > old.bit_width
    )


def _check_type(old: pa.DataType, new: pa.DataType, where: str) -> SchemaCheck:
    if old.equals(new):
        return _AS_IS
    if _widens(old, new):
        return _migration(f"{where} widens from {old} to {new}")
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        checks = []
        old_fields = {old.field(i).name: old.field(i) for i in range(old.num_fields)}
        new_names = set()
        for i in range(new.num_fields):
            field = new.field(i)
            new_names.add(field.name)
            path = f"{where}.{field.name}"
            before = old_fields.get(field.name)
            if before is None:
                checks.append(
                    _migration(f"{path} is added")
                    if field.nullable
                    else _incompatible(f"{path} is added but not nullable")
                )
                continue
            if before.nullable and not field.nullable:
                checks.append(_incompatible(f"{path} is no longer nullable"))
            elif field.nullable and not before.nullable:
                checks.append(_migration(f"{path} becomes nullable"))
            checks.append(_check_type(before.type, field.type, path))
        checks += [
            _migration(f"{where}.{name} is dropped") for name in old_fields if name not in new_names
        ]
        found = _worst(checks)
        return (
            found
            if found.compatibility is not Compatibility.COMPATIBLE_AS_IS
            else _migration(f"{where} reorders its fields")
        )
    if pa.types.is_list(old) and pa.types.is_list(new):
        return _check_type(old.value_type, new.value_type, f"{where}[]")
    if pa.types.is_map(old) and pa.types.is_map(new):
        return _worst(
            [
                _check_type(old.key_type, new.key_type, f"{where} map key"),
                _check_type(old.item_type, new.item_type, f"{where} map value"),
            ]
        )
    verb = "narrows" if _widens(new, old) else "changes"
    return _incompatible(f"{where} {verb} from {old} to {new}")


def check_schema(stored: pa.Schema, new: pa.Schema) -> SchemaCheck:
    """How rows of ``stored`` schema restore into a state whose rows have ``new`` schema.

    A column now declared :data:`~statecore.types.PICKLED` restores only from a column that
    statecore wrote pickled (its stored field is marked): bytes written as ``bytes`` may come
    from anyone, and unpickling them runs their code.
    """
    for field in new:
        was = stored.field(field.name) if field.name in stored.names else None
        if was is not None and is_pickled(field) and not is_pickled(was):
            return _incompatible(
                f"column {field.name!r} is now declared PICKLED but its stored values were "
                "not written pickled by statecore (unpickling them could run any code); "
                "keep the old type or use a new state name"
            )
    if stored.equals(new, check_metadata=False):
        return _AS_IS
    if _KEY in stored.names and _KEY in new.names:
        old_key, new_key = stored.field(_KEY).type, new.field(_KEY).type
        if not old_key.equals(new_key):
            return _incompatible(f"the key type changed from {old_key} to {new_key}")
    checks = []
    for field in new:
        if field.name not in stored.names:
            if field.name == TTL_TIMESTAMP:
                checks.append(_migration("TTL is turned on"))
            else:
                checks.append(_incompatible(f"column {field.name!r} is new"))
            continue
        before = stored.field(field.name)
        if before.nullable and not field.nullable:
            checks.append(_incompatible(f"column {field.name!r} is no longer nullable"))
        checks.append(_check_type(before.type, field.type, field.name))
    for field in stored:
        if field.name not in new.names:
            checks.append(
                _migration("TTL is turned off")
                if field.name == TTL_TIMESTAMP
                else _incompatible(f"column {field.name!r} is gone")
            )
    found = _worst(checks)
    if found.compatibility is Compatibility.COMPATIBLE_AS_IS:  # only nullability relaxed
        return _migration("a column becomes nullable")
    return found


def _migrate_array(array: pa.Array, new: pa.DataType) -> pa.Array:
    old = array.type
    if old.equals(new):
        return array
    if _widens(old, new):
        return pc.cast(array, new)
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(old):
        children = dict(
            zip((old.field(i).name for i in range(old.num_fields)), array.flatten())
        )  # offset-adjusted
        arrays = []
        for i in range(new.num_fields):
            field = new.field(i)
            child = children.get(field.name)
            arrays.append(
                pa.nulls(len(array), field.type)
                if child is None
                else _migrate_array(child, field.type)
            )
        return pa.StructArray.from_arrays(arrays, fields=list(new), mask=mask)
    if pa.types.is_list(old) or pa.types.is_map(old):
        raw = array.offsets.to_numpy(zero_copy_only=False)
        offsets = pa.array(raw - raw[0], pa.int32())
        if pa.types.is_list(old):
            values = _migrate_array(array.flatten(), new.value_type)
            return pa.ListArray.from_arrays(offsets, values, type=new, mask=mask)
        start, end = int(raw[0]), int(raw[-1])
        keys = _migrate_array(array.keys.slice(start, end - start), new.key_type)
        items = _migrate_array(array.items.slice(start, end - start), new.item_type)
        return pa.MapArray.from_arrays(offsets, keys, items, type=new, mask=mask)
    raise StateMigrationError(f"cannot migrate {old} to {new}")


def migrate_rows(rows: pa.Table, new: pa.Schema, *, label: str = "state") -> pa.Table:
    """``rows`` in schema ``new``; a ``ttl_timestamp`` column that ``rows`` lacks stays absent
    (the backend starts the time to live at restore)."""
    check = check_schema(rows.schema, new)
    if check.is_incompatible:
        raise StateMigrationError(f"{label}: {check.reason}")
    if check.compatibility is Compatibility.COMPATIBLE_AS_IS:
        return rows
    columns = []
    fields = []
    for field in new:
        if field.name not in rows.column_names:
            continue  # ttl_timestamp of TTL turned on
        array = rows.column(field.name).combine_chunks()
        columns.append(_migrate_array(array, field.type))
        fields.append(field)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
