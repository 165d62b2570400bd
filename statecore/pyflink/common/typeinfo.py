"""PyFlink's ``Types`` (``pyflink.common.typeinfo``), each a statecore
:class:`~statecore.types.TypeInfo`: the Arrow type of the state's snapshot column.

>>> Types.LONG().arrow, Types.INT().arrow, Types.STRING().arrow
(DataType(int64), DataType(int32), DataType(string))
>>> Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.LONG()]).arrow
StructType(struct<user: string, n: int64>)
>>> Types.PICKLED_BYTE_ARRAY().pickled
True

Composite values are stored in their Arrow form: a ``ROW``/``ROW_NAMED``/``TUPLE`` value is a
tuple (or a dict by field name), a ``MAP`` value a dict, a ``LIST`` or array value a list. A
state declared through the PyFlink layer's ``RuntimeContext`` reads them back as PyFlink
gives them (a :class:`~statecore.pyflink.common.types.Row`, a tuple, a dict; see
:mod:`statecore.pyflink.datastream.converting`), where statecore's own API gives a struct read
back from RocksDB or a snapshot as a dict and a map as a list of ``(key, value)`` pairs.
``BIG_INT`` and ``BIG_DEC`` have no exact Arrow type and raise
:class:`~statecore.errors.PyFlinkUnsupportedError` (declare a ``pyarrow.decimal128(p, s)``
or ``Types.LONG()`` instead); ``PICKLED_BYTE_ARRAY`` is allowed at the top of a state's type
and as a list state's element, not inside a row, list or map.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from statecore.errors import COMING_FROM_PYFLINK, PyFlinkUnsupportedError
from statecore.types import PICKLED, TypeInfo, TypeSpec

__all__ = ["TypeInformation", "Types"]


@dataclass(frozen=True, repr=False)
class TypeInformation(TypeInfo):
    """A PyFlink type information: statecore's :class:`~statecore.types.TypeInfo` of its Arrow
    type, with PyFlink's name for it (``LONG``, ``ROW_NAMED(...)``)."""

    name: str = field(default="", compare=False)
    element: TypeInformation | None = field(default=None, compare=False)
    """The element type of a ``LIST`` or array (what a list state stores)."""
    kind: str = field(default="", compare=False)
    """``ROW``, ``TUPLE``, ``MAP`` or ``LIST`` for a composite type (how PyFlink gives its
    values to Python, :func:`~statecore.pyflink.common.types.to_python`), else ``""``."""
    field_names: tuple[str, ...] = field(default=(), compare=False)
    field_types: tuple[TypeInformation, ...] = field(default=(), compare=False)
    """A row's or tuple's fields; a map's key and value types."""
    named: bool = field(default=False, compare=False)
    """Whether a ``ROW``'s fields have names (``ROW_NAMED``)."""

    @classmethod
    def of_spec(cls, spec: TypeSpec, name: str) -> TypeInformation:
        info = TypeInfo.of(spec)
        return cls(info.arrow, pickled=info.pickled, accepted=info.accepted, name=name)

    @property
    def spec(self) -> TypeSpec:
        """What a statecore descriptor declares for this type."""
        if self.pickled_elements:
            raise PyFlinkUnsupportedError(
                f"{self.name}: a list of PICKLED_BYTE_ARRAY is a list state's element type "
                "only (ListStateDescriptor(name, Types.PICKLED_BYTE_ARRAY())); as a value, "
                f"declare Types.PICKLED_BYTE_ARRAY() for the whole list ({COMING_FROM_PYFLINK})"
            )
        return PICKLED if self.pickled else self.arrow

    def __repr__(self) -> str:
        return self.name


def _nested(info: TypeInformation, where: str) -> pa.DataType:
    if info.pickled or info.pickled_elements:
        raise PyFlinkUnsupportedError(
            f"{where}: PICKLED_BYTE_ARRAY cannot be nested in a row, list or map (statecore "
            "stores it as a whole binary column); declare the whole value "
            f"Types.PICKLED_BYTE_ARRAY() ({COMING_FROM_PYFLINK})"
        )
    return info.arrow


def _struct(
    name: str,
    names: Sequence[str],
    types: Sequence[TypeInformation],
    *,
    kind: str = "ROW",
    named: bool = False,
) -> TypeInformation:
    if len(names) != len(types):
        raise PyFlinkUnsupportedError(f"{name}: {len(names)} names for {len(types)} types")
    fields = [pa.field(n, _nested(t, name)) for n, t in zip(names, types)]
    info = TypeInfo.of(pa.struct(fields))
    return TypeInformation(
        info.arrow, accepted=info.accepted, name=name, kind=kind, field_names=tuple(names),
        field_types=tuple(types), named=named,
    )  # fmt: skip


def _array(name: str, element: TypeInformation) -> TypeInformation:
    if element.pickled:  # a list state of pickled elements stores a list<binary>
        arrow = pa.list_(pa.binary())
        return TypeInformation(
            arrow, pickled_elements=True, name=name, element=element, kind="LIST"
        )
    info = TypeInfo.of(pa.list_(_nested(element, name)))
    return TypeInformation(
        info.arrow, accepted=info.accepted, name=name, element=element, kind="LIST"
    )


def _unsupported(name: str, instead: str) -> PyFlinkUnsupportedError:
    return PyFlinkUnsupportedError(
        f"Types.{name}() has no exact Arrow type in statecore; declare {instead} "
        f"({COMING_FROM_PYFLINK})"
    )


class Types:
    """PyFlink's type information factory, mapped to statecore's Arrow types."""

    @staticmethod
    def STRING() -> TypeInformation:
        return TypeInformation.of_spec(str, "STRING")

    @staticmethod
    def BYTE() -> TypeInformation:
        return TypeInformation.of_spec(pa.int8(), "BYTE")

    @staticmethod
    def BOOLEAN() -> TypeInformation:
        return TypeInformation.of_spec(bool, "BOOLEAN")

    @staticmethod
    def SHORT() -> TypeInformation:
        return TypeInformation.of_spec(pa.int16(), "SHORT")

    @staticmethod
    def INT() -> TypeInformation:
        return TypeInformation.of_spec(pa.int32(), "INT")

    @staticmethod
    def LONG() -> TypeInformation:
        return TypeInformation.of_spec(int, "LONG")

    @staticmethod
    def FLOAT() -> TypeInformation:
        return TypeInformation.of_spec(pa.float32(), "FLOAT")

    @staticmethod
    def DOUBLE() -> TypeInformation:
        return TypeInformation.of_spec(float, "DOUBLE")

    @staticmethod
    def CHAR() -> TypeInformation:
        return TypeInformation.of_spec(str, "CHAR")

    @staticmethod
    def BIG_INT() -> TypeInformation:
        raise _unsupported("BIG_INT", "Types.LONG() or a pyarrow.decimal128(38, 0)")

    @staticmethod
    def BIG_DEC() -> TypeInformation:
        raise _unsupported("BIG_DEC", "a pyarrow.decimal128(precision, scale)")

    @staticmethod
    def INSTANT() -> TypeInformation:
        return TypeInformation.of_spec(pa.timestamp("us", tz="UTC"), "INSTANT")

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        return TypeInformation.of_spec(pa.date32(), "SQL_DATE")

    @staticmethod
    def SQL_TIME() -> TypeInformation:
        return TypeInformation.of_spec(pa.time64("us"), "SQL_TIME")

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        return TypeInformation.of_spec(pa.timestamp("us"), "SQL_TIMESTAMP")

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return TypeInformation.of_spec(PICKLED, "PICKLED_BYTE_ARRAY")

    @staticmethod
    def ROW(field_types: Sequence[TypeInformation]) -> TypeInformation:
        names = [f"f{i}" for i in range(len(field_types))]
        return _struct(f"ROW({list(field_types)})", names, field_types)

    @staticmethod
    def ROW_NAMED(
        field_names: Sequence[str], field_types: Sequence[TypeInformation]
    ) -> TypeInformation:
        return _struct(
            f"ROW_NAMED({list(field_names)}, {list(field_types)})",
            field_names,
            field_types,
            named=True,
        )

    @staticmethod
    def TUPLE(field_types: Sequence[TypeInformation]) -> TypeInformation:
        names = [f"f{i}" for i in range(len(field_types))]
        return _struct(f"TUPLE({list(field_types)})", names, field_types, kind="TUPLE")

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:
        if element_type.arrow == pa.int8() and element_type.name == "BYTE":
            return TypeInformation.of_spec(bytes, "PRIMITIVE_ARRAY(BYTE)")  # byte[] is bytes
        return _array(f"PRIMITIVE_ARRAY({element_type})", element_type)

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return _array(f"BASIC_ARRAY({element_type})", element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return _array(f"OBJECT_ARRAY({element_type})", element_type)

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:
        return _array(f"LIST({element_type_info})", element_type_info)

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:
        name = f"MAP({key_type_info}, {value_type_info})"
        arrow = pa.map_(_nested(key_type_info, name), _nested(value_type_info, name))
        info = TypeInfo.of(arrow)
        return TypeInformation(
            info.arrow, accepted=info.accepted, name=name, kind="MAP",
            field_types=(key_type_info, value_type_info),
        )  # fmt: skip
