"""PyFlink's ``Row`` (``pyflink.common.types``): a record of named (or positional) fields.

>>> row = Row(name="ann", count=2)
>>> row.name, row[1], row["count"], row.as_dict()
('ann', 2, 2, {'name': 'ann', 'count': 2})
>>> Person = Row("name", "age")
>>> Person("bob", 30)
Row(name='bob', age=30)
>>> row[1] += 1; row
Row(name='ann', count=3)

A state declared with a ``ROW`` type stores a ``Row`` as a struct (SQL reads its fields) and
reads it back as a ``Row``, on both backends (:mod:`statecore.pyflink.datastream.converting`).
``row_kind`` is always ``INSERT``: statecore's outputs are append-only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["Row", "RowKind", "to_python", "to_storage"]


class RowKind:
    """PyFlink's change kinds; statecore's streams are append-only (``INSERT``)."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3


class Row:
    """PyFlink's ``Row``: ``Row(name="ann", n=1)`` (named) or ``Row("ann", 1)`` (positional);
    mutable, as PyFlink's (``row[1] += 1``)."""

    __slots__ = ("_values", "_fields")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError("Row takes positional or named fields, not both")
        self._values: list[Any] = list(kwargs.values()) if kwargs else list(args)
        self._fields: tuple[str, ...] | None = tuple(kwargs) if kwargs else None

    @classmethod
    def of_fields(cls, names: Any, values: Any) -> Row:
        """A row of ``values`` named ``names`` (``None``: positional)."""
        row = cls.__new__(cls)
        row._values = list(values)
        row._fields = None if names is None else tuple(names)
        return row

    def __call__(self, *values: Any) -> Row:
        """A row of this row's fields (``Row("name", "age")``) holding ``values``."""
        return Row.of_fields(tuple(self._values), values)

    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        if self._fields is None:
            raise TypeError("a Row without field names cannot be a dict")
        if not recursive:
            return dict(zip(self._fields, self._values))
        return {
            n: v.as_dict(True) if isinstance(v, Row) and v._fields else v
            for n, v in zip(self._fields, self._values)
        }

    def get_fields_by_names(self, names: Any) -> list[Any]:
        return [self[n] for n in names]

    def set_field_names(self, field_names: Any) -> None:
        self._fields = tuple(field_names)

    def get_row_kind(self) -> int:
        return RowKind.INSERT

    def set_row_kind(self, row_kind: int) -> None:
        if row_kind != RowKind.INSERT:
            raise ValueError("statecore's rows are append-only (RowKind.INSERT)")

    def _index(self, item: Any) -> Any:
        if isinstance(item, str):
            if self._fields is None or item not in self._fields:
                raise KeyError(item)
            return self._fields.index(item)
        return item

    def __getitem__(self, item: Any) -> Any:
        return self._values[self._index(item)]

    def __setitem__(self, item: Any, value: Any) -> None:
        self._values[self._index(item)] = value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        fields = self._fields
        if fields is None or name not in fields:
            raise AttributeError(name)
        return self._values[fields.index(name)]

    def __setattr__(self, name: str, value: Any) -> None:
        if name in Row.__slots__:
            object.__setattr__(self, name, value)
        elif self._fields is not None and name in self._fields:
            self._values[self._fields.index(name)] = value
        else:
            raise AttributeError(f"Row has no field {name!r}")

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, item: Any) -> bool:
        return item in self._values

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Row):
            return self._values == other._values and (
                self._fields is None or other._fields is None or self._fields == other._fields
            )
        if isinstance(other, tuple | list):
            return self._values == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._values))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Row.of_fields, (self._fields, self._values))

    def __repr__(self) -> str:
        if self._fields is None:
            return "Row(" + ", ".join(repr(v) for v in self._values) + ")"
        pairs = zip(self._fields, self._values)
        return "Row(" + ", ".join(f"{n}={v!r}" for n, v in pairs) + ")"


def to_storage(value: Any) -> Any:
    """A value as statecore stores it: a :class:`Row` (also nested) as a tuple."""
    if isinstance(value, Row):
        return tuple(to_storage(v) for v in value._values)
    if isinstance(value, tuple):
        return tuple(to_storage(v) for v in value)
    if isinstance(value, list):
        return [to_storage(v) for v in value]
    if isinstance(value, dict):
        return {k: to_storage(v) for k, v in value.items()}
    return value


def to_python(value: Any, type_info: Any) -> Any:
    """``value`` as PyFlink gives a value of ``type_info`` to Python code: a ``ROW`` as a
    :class:`Row` (named for ``ROW_NAMED``), a ``TUPLE`` as a tuple, a ``MAP`` as a dict, a
    list as a list; from a tuple, a dict (a struct read back from RocksDB or a snapshot) or a
    list of pairs (a map read back). Other values pass unchanged."""
    kind = getattr(type_info, "kind", None)
    if value is None or kind is None:
        return value
    if kind in ("ROW", "TUPLE"):
        names = type_info.field_names
        fields = type_info.field_types
        values = [value[n] for n in names] if isinstance(value, dict) else list(value)
        converted = [to_python(v, t) for v, t in zip(values, fields)]
        if kind == "TUPLE":
            return tuple(converted)
        return Row.of_fields(names, converted)  # a ROW's fields are f0, f1, ... as in PyFlink
    if kind == "MAP":
        items = value.items() if isinstance(value, dict) else value
        key_type, value_type = type_info.field_types
        return {to_python(k, key_type): to_python(v, value_type) for k, v in items}
    if kind == "LIST":
        return [to_python(v, type_info.element) for v in value]
    return value
