"""An element as Flink prints it (``print()``) and writes it (``Encoder.simple_string_encoder()``):
Flink converts a typed element to its Java value and writes ``toString()``; an element of no
declared type (pickled) is written as Python's ``str``.

>>> from statecore.pyflink.common import Row, Types
>>> flink_string(Row(word="to", n=2), Types.ROW_NAMED(["word", "n"], [Types.STRING(), Types.INT()]))
'+I[to,2]'
>>> flink_string(("to", 2), Types.TUPLE([Types.STRING(), Types.INT()]))
'(to,2)'
>>> flink_string(("to", 2), None), flink_string(True, Types.BOOLEAN())
("('to', 2)", 'true')
"""

from __future__ import annotations

from typing import Any

__all__ = ["flink_string"]


def _java(value: Any, type_info: Any) -> str:
    """``value``'s Java ``toString()`` as a field of a typed element."""
    if value is None:
        return "null"
    kind = getattr(type_info, "kind", "")
    if kind == "ROW":
        fields = [value[n] for n in type_info.field_names] if isinstance(value, dict) else value
        inner = ",".join(_java(v, t) for v, t in zip(fields, type_info.field_types))
        return f"+I[{inner}]"
    if kind == "TUPLE":
        fields = [value[n] for n in type_info.field_names] if isinstance(value, dict) else value
        return "(" + ",".join(_java(v, t) for v, t in zip(fields, type_info.field_types)) + ")"
    if kind == "MAP":
        key_type, value_type = type_info.field_types
        items = value.items() if isinstance(value, dict) else value
        return (
            "{" + ", ".join(f"{_java(k, key_type)}={_java(v, value_type)}" for k, v in items) + "}"
        )
    if kind == "LIST":
        return "[" + ", ".join(_java(v, type_info.element) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def flink_string(value: Any, type_info: Any) -> str:
    """The line Flink prints for ``value`` of ``type_info`` (``None``: no declared type)."""
    if type_info is None or getattr(type_info, "pickled", False):
        return str(value)
    return _java(value, type_info)
