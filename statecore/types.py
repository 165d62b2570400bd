"""Typed state values: every state declares an Arrow type, which is also its snapshot column type.

A descriptor's type is a Python type (``int``, ``float``, ``str``, ``bytes``, ``bool``), any
``pyarrow.DataType`` (structs, lists, maps, decimals, timestamps, ...) or :data:`PICKLED`, which
stores opaque pickled objects and is strictly opt-in: restoring never unpickles by default.

>>> arrow_type(int), arrow_type(str)
(DataType(int64), DataType(string))
>>> TypeInfo.of(float).accepts(1.5), TypeInfo.of(float).accepts("x")
(True, False)
"""

from __future__ import annotations

import base64
import pickle
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import pyarrow as pa

from statecore.errors import ConfigError, StateAccessError

__all__ = [
    "PICKLED",
    "PICKLED_FIELD",
    "Pickled",
    "TypeSpec",
    "TypeInfo",
    "arrow_type",
    "is_pickled",
    "schema_to_text",
    "schema_from_text",
]


class Pickled:
    """Marker type: values are pickled into a binary column (opt-in; never the default)."""

    def __repr__(self) -> str:
        return "PICKLED"


PICKLED: Final = Pickled()

TypeSpec: TypeAlias = "type | pa.DataType | Pickled"

PICKLED_FIELD: Final = {b"statecore.pickled": b"true"}
"""Field metadata of a snapshot column whose values (or list elements) statecore pickled: the
stored schema says which bytes were written by ``pickle.dumps``, so that bytes written as
``bytes`` are never unpickled after a change of declaration to :data:`PICKLED`."""

_PYTHON_TYPES: dict[type, pa.DataType] = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bytes: pa.binary(),
    bool: pa.bool_(),
}

# Python classes a value of a primitive Arrow type may have; checked on every write (one
# class lookup), so a wrong value fails at the write that made it, not at the next snapshot.
_ACCEPTED: dict[pa.DataType, tuple[type, ...]] = {
    pa.int64(): (int,),
    pa.int32(): (int,),
    pa.int16(): (int,),
    pa.int8(): (int,),
    pa.float64(): (float, int),
    pa.float32(): (float, int),
    pa.string(): (str,),
    pa.large_string(): (str,),
    pa.binary(): (bytes,),
    pa.large_binary(): (bytes,),
    pa.bool_(): (bool,),
}


def arrow_type(spec: TypeSpec) -> pa.DataType:
    """The Arrow type for a descriptor's type spec."""
    if isinstance(spec, Pickled):
        return pa.binary()
    if isinstance(spec, pa.DataType):
        return spec
    if isinstance(spec, type) and spec in _PYTHON_TYPES:
        return _PYTHON_TYPES[spec]
    raise ConfigError(
        f"unsupported state type {spec!r}: use int, float, str, bytes, bool, a pyarrow.DataType "
        "or statecore.types.PICKLED"
    )


@dataclass(frozen=True)
class TypeInfo:
    """An Arrow type plus how Python values of it are checked and stored."""

    arrow: pa.DataType
    pickled: bool = False
    pickled_elements: bool = False  # a list of pickled values (ListState of PICKLED)
    accepted: tuple[type, ...] | None = field(default=None, compare=False)

    @classmethod
    def of(cls, spec: TypeSpec) -> TypeInfo:
        t = arrow_type(spec)
        if isinstance(spec, Pickled):
            return cls(t, pickled=True)
        accepted = tuple(c for c in _ACCEPTED.get(t, ()) if c is not bool or t == pa.bool_())
        return cls(t, accepted=accepted or None)

    def accepts(self, value: object) -> bool:
        """Whether ``value`` may be stored (exact for primitives; nested types checked on write)."""
        if self.accepted is None:
            return True
        if isinstance(value, bool) and self.arrow != pa.bool_():
            return False
        return isinstance(value, self.accepted)

    def check(self, value: object, *, state: str, what: str = "value") -> None:
        """Raise :class:`StateAccessError` unless ``value`` may be stored in ``state``."""
        if value is None:
            raise StateAccessError(f"state {state!r}: a {what} must not be None")
        if not self.accepts(value):
            raise StateAccessError(
                f"state {state!r}: {what} {value!r} of type {type(value).__name__} "
                f"does not match the declared type {self.arrow}"
            )

    def to_storage(self, values: list[Any]) -> list[Any]:
        if self.pickled_elements:
            return [None if v is None else [pickle.dumps(e) for e in v] for v in values]
        return [pickle.dumps(v) for v in values] if self.pickled else values

    def field(self, name: str, *, nullable: bool = True) -> pa.Field:
        """The snapshot column ``name`` of this type, marked when its values are pickled.

        >>> TypeInfo.of(PICKLED).field("value").metadata
        {b'statecore.pickled': b'true'}
        """
        marked = self.pickled or self.pickled_elements
        return pa.field(
            name, self.arrow, nullable=nullable, metadata=PICKLED_FIELD if marked else None
        )

    def from_storage(self, values: list[Any]) -> list[Any]:
        if self.pickled_elements:
            return [None if v is None else [pickle.loads(e) for e in v] for v in values]
        return [pickle.loads(v) for v in values] if self.pickled else values


def is_pickled(field: pa.Field) -> bool:
    """Whether the snapshot column ``field`` holds values statecore pickled."""
    return bool(field.metadata) and field.metadata.get(b"statecore.pickled") == b"true"


def schema_to_text(schema: pa.Schema) -> str:
    """A lossless text form of an Arrow schema (for the catalog)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
