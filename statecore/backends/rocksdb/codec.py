"""Binary serializers for Arrow-typed state values, keys and namespaces.

Every Arrow type gets a :class:`Codec` with two forms:

- ``encode`` / ``decode``: a whole value that fills a RocksDB value or the tail of a RocksDB key
  (a string is its UTF-8 bytes, an int64 eight bytes);
- ``write`` / ``read``: a *self-delimiting* form, used inside lists, structs and maps, and for
  the key and namespace in the middle of a RocksDB key: no encoded value is a prefix of another,
  so ``[key][namespace]`` decodes unambiguously and a prefix seek on ``[key][namespace]`` never
  meets another key's entries.

Scalars are fixed-width little-endian or varint-length-prefixed; lists are a count and their
elements, structs their fields in order, each nested value behind a presence byte (Arrow values
may be null). The stored form of a TTL value, ``struct<value, ttl_timestamp>``, is an envelope
with the timestamp first, so expiry is read at a fixed offset. Types without a hand-written
form (decimals, timestamps, ...) fall back to a one-row Arrow IPC stream: slower, never lossy.

>>> codec = codec_for(pa.struct([("sum", pa.float64()), ("count", pa.int64())]))
>>> codec.decode(codec.encode({"sum": 1.5, "count": 2}))
{'sum': 1.5, 'count': 2}
>>> s = codec_for(pa.string())
>>> out = bytearray(); s.write("ab", out); s.write("", out); bytes(out)
b'\\x02ab\\x00'
>>> s.read(bytes(out), 3)
('', 4)
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import pyarrow as pa

__all__ = [
    "Codec",
    "codec_for",
    "write_varint",
    "read_varint",
    "encode_length",
    "is_ttl_struct",
    "TTL_STAMP",
]

Write = Callable[[Any, bytearray], None]
Read = Callable[[bytes, int], tuple[Any, int]]

_SMALL_LENGTHS = [bytes((n,)) for n in range(128)]

TTL_STAMP = struct.Struct("<q")
"""The last-access timestamp in front of a TTL value (epoch milliseconds)."""


def write_varint(n: int, out: bytearray) -> None:
    """Append ``n >= 0`` as an unsigned LEB128 varint."""
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def encode_length(n: int) -> bytes:
    """``n`` as a varint (one byte below 128)."""
    if n < 128:
        return _SMALL_LENGTHS[n]
    out = bytearray()
    write_varint(n, out)
    return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


class Codec:
    """The binary form of one Arrow type (see the module docstring)."""

    __slots__ = ("arrow", "encode", "decode", "write", "read")

    def __init__(
        self,
        arrow: pa.DataType,
        *,
        encode: Callable[[Any], bytes],
        decode: Callable[[bytes], Any],
        write: Write,
        read: Read,
    ) -> None:
        self.arrow = arrow
        self.encode = encode
        self.decode = decode
        self.write = write
        self.read = read

    def __repr__(self) -> str:
        return f"Codec({self.arrow})"


def _whole(write: Write, read: Read) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    def encode(value: Any) -> bytes:
        out = bytearray()
        write(value, out)
        return bytes(out)

    def decode(data: bytes) -> Any:
        return read(data, 0)[0]

    return encode, decode


def _fixed(arrow: pa.DataType, fmt: str) -> Codec:
    st = struct.Struct("<" + fmt)
    pack, unpack, unpack_from, size = st.pack, st.unpack, st.unpack_from, st.size

    def write(value: Any, out: bytearray) -> None:
        out += pack(value)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        return unpack_from(buf, pos)[0], pos + size

    def decode(data: bytes) -> Any:
        return unpack(data)[0]

    return Codec(arrow, encode=pack, decode=decode, write=write, read=read)


def _bool(arrow: pa.DataType) -> Codec:
    def encode(value: Any) -> bytes:
        return b"\x01" if value else b"\x00"

    def write(value: Any, out: bytearray) -> None:
        out.append(1 if value else 0)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        return buf[pos] != 0, pos + 1

    return Codec(arrow, encode=encode, decode=lambda data: data != b"\x00", write=write, read=read)


def _string(arrow: pa.DataType) -> Codec:
    def encode(value: Any) -> bytes:
        return value.encode()  # type: ignore[no-any-return]

    def decode(data: bytes) -> Any:
        return data.decode()

    def write(value: Any, out: bytearray) -> None:
        data = value.encode()
        n = len(data)
        if n < 128:
            out.append(n)
        else:
            write_varint(n, out)
        out += data

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(buf, pos)
        end = pos + n
        return buf[pos:end].decode(), end

    return Codec(arrow, encode=encode, decode=decode, write=write, read=read)


def _binary(arrow: pa.DataType) -> Codec:
    def encode(value: Any) -> bytes:
        return value if value.__class__ is bytes else bytes(value)

    def write(value: Any, out: bytearray) -> None:
        write_varint(len(value), out)
        out += value

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(buf, pos)
        end = pos + n
        return bytes(buf[pos:end]), end

    return Codec(arrow, encode=encode, decode=bytes, write=write, read=read)


def _fixed_binary(arrow: pa.FixedSizeBinaryType) -> Codec:
    width = arrow.byte_width

    def write(value: Any, out: bytearray) -> None:
        if len(value) != width:
            raise ValueError(f"expected {width} bytes for {arrow}, got {len(value)}")
        out += value

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        return bytes(buf[pos : pos + width]), pos + width

    encode, _ = _whole(write, read)
    return Codec(arrow, encode=encode, decode=bytes, write=write, read=read)


def _nullable(codec: Codec) -> tuple[Write, Read]:
    """``codec``'s self-delimiting form behind a presence byte."""
    inner_write, inner_read = codec.write, codec.read

    def write(value: Any, out: bytearray) -> None:
        if value is None:
            out.append(0)
        else:
            out.append(1)
            inner_write(value, out)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        if buf[pos] == 0:
            return None, pos + 1
        return inner_read(buf, pos + 1)

    return write, read


def _list(arrow: pa.DataType) -> Codec:
    write_item, read_item = _nullable(codec_for(arrow.value_type))

    def write(value: Any, out: bytearray) -> None:
        items = value if isinstance(value, list | tuple) else list(value)
        write_varint(len(items), out)
        for item in items:
            write_item(item, out)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(buf, pos)
        items = []
        for _ in range(n):
            item, pos = read_item(buf, pos)
            items.append(item)
        return items, pos

    encode, decode = _whole(write, read)
    return Codec(arrow, encode=encode, decode=decode, write=write, read=read)


def _struct(arrow: pa.StructType) -> Codec:
    names = [arrow.field(i).name for i in range(arrow.num_fields)]
    fields = [_nullable(codec_for(arrow.field(i).type)) for i in range(arrow.num_fields)]
    pairs = list(zip(names, fields))

    def write(value: Any, out: bytearray) -> None:
        if isinstance(value, Mapping):
            for name, (write_field, _) in pairs:
                write_field(value.get(name), out)
        else:
            values = tuple(value)
            if len(values) != len(pairs):
                raise ValueError(f"{arrow} needs {len(pairs)} fields, got {len(values)}")
            for item, (write_field, _) in zip(values, fields):
                write_field(item, out)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        result = {}
        for name, (_, read_field) in pairs:
            result[name], pos = read_field(buf, pos)
        return result, pos

    encode, decode = _whole(write, read)
    return Codec(arrow, encode=encode, decode=decode, write=write, read=read)


def _map(arrow: pa.MapType) -> Codec:
    key = codec_for(arrow.key_type)
    write_item, read_item = _nullable(codec_for(arrow.item_type))
    write_key, read_key = key.write, key.read

    def write(value: Any, out: bytearray) -> None:
        entries = list(value.items() if isinstance(value, Mapping) else value)
        write_varint(len(entries), out)
        for k, v in entries:
            write_key(k, out)
            write_item(v, out)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(buf, pos)
        entries = []
        for _ in range(n):
            k, pos = read_key(buf, pos)
            v, pos = read_item(buf, pos)
            entries.append((k, v))
        return entries, pos

    encode, decode = _whole(write, read)
    return Codec(arrow, encode=encode, decode=decode, write=write, read=read)


def is_ttl_struct(arrow: pa.DataType) -> bool:
    """Whether ``arrow`` is the stored form of a TTL value: ``struct<value, ttl_timestamp>``."""
    return bool(
        pa.types.is_struct(arrow)
        and arrow.num_fields == 2
        and arrow.field(0).name == "value"
        and arrow.field(1).name == "ttl_timestamp"
        and arrow.field(1).type == pa.int64()
    )


def _ttl_envelope(arrow: pa.StructType) -> Codec:
    """A TTL value as ``[timestamp][value]``: the timestamp at a fixed offset, so expiry is
    checked without decoding the value."""
    value = codec_for(arrow.field(0).type)
    write_value, read_value = _nullable(value)
    encode_value, decode_value = value.encode, value.decode
    pack, unpack_from = TTL_STAMP.pack, TTL_STAMP.unpack_from

    def encode(stored: Any) -> bytes:
        v = stored["value"]
        head = pack(stored["ttl_timestamp"])
        return head + b"\x00" if v is None else head + b"\x01" + encode_value(v)

    def decode(data: bytes) -> Any:
        v = None if data[8] == 0 else decode_value(data[9:])
        return {"value": v, "ttl_timestamp": unpack_from(data, 0)[0]}

    def write(stored: Any, out: bytearray) -> None:
        out += pack(stored["ttl_timestamp"])
        write_value(stored["value"], out)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        stamp = unpack_from(buf, pos)[0]
        v, pos = read_value(buf, pos + 8)
        return {"value": v, "ttl_timestamp": stamp}, pos

    return Codec(arrow, encode=encode, decode=decode, write=write, read=read)


def _arrow_ipc(arrow: pa.DataType) -> Codec:
    schema = pa.schema([pa.field("v", arrow)])

    def encode(value: Any) -> bytes:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_batch(pa.record_batch([pa.array([value], type=arrow)], schema=schema))
        return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]

    def decode(data: bytes) -> Any:
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all().column(0)[0].as_py()

    def write(value: Any, out: bytearray) -> None:
        data = encode(value)
        write_varint(len(data), out)
        out += data

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = read_varint(buf, pos)
        return decode(bytes(buf[pos : pos + n])), pos + n

    return Codec(arrow, encode=encode, decode=decode, write=write, read=read)


_FIXED_FORMATS = {
    pa.int64(): "q",
    pa.int32(): "i",
    pa.int16(): "h",
    pa.int8(): "b",
    pa.uint64(): "Q",
    pa.uint32(): "I",
    pa.uint16(): "H",
    pa.uint8(): "B",
    pa.float64(): "d",
    pa.float32(): "f",
}


@lru_cache(maxsize=256)
def codec_for(arrow: pa.DataType) -> Codec:
    """The codec of ``arrow`` (cached per type)."""
    fmt = _FIXED_FORMATS.get(arrow)
    if fmt is not None:
        return _fixed(arrow, fmt)
    t = pa.types
    if t.is_boolean(arrow):
        return _bool(arrow)
    if t.is_string(arrow) or t.is_large_string(arrow):
        return _string(arrow)
    if t.is_binary(arrow) or t.is_large_binary(arrow):
        return _binary(arrow)
    if t.is_fixed_size_binary(arrow):
        return _fixed_binary(arrow)
    if t.is_list(arrow) or t.is_large_list(arrow) or t.is_fixed_size_list(arrow):
        return _list(arrow)
    if is_ttl_struct(arrow):
        return _ttl_envelope(arrow)
    if t.is_struct(arrow):
        return _struct(arrow)
    if t.is_map(arrow):
        return _map(arrow)
    return _arrow_ipc(arrow)
