"""Typed binary codecs and the RocksDB key layout."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from statecore.backends.rocksdb.codec import codec_for, is_ttl_struct
from statecore.backends.rocksdb.keys import KeyLayout, key_group_bounds, prefix_successor

TTL_INT = pa.struct(
    [pa.field("value", pa.int64()), pa.field("ttl_timestamp", pa.int64(), nullable=False)]
)

CASES: list[tuple[pa.DataType, list[Any]]] = [
    (pa.int64(), [0, -1, 2**63 - 1, -(2**63)]),
    (pa.int32(), [7, -(2**31)]),
    (pa.int8(), [-128, 127]),
    (pa.uint16(), [0, 65535]),
    (pa.float64(), [0.0, -1.5, 1e300]),
    (pa.float32(), [0.5, -2.0]),
    (pa.string(), ["", "a", "ünïcødé", "x" * 300]),
    (pa.large_string(), ["big"]),
    (pa.binary(), [b"", b"\x00\xff", b"y" * 200]),
    (pa.bool_(), [True, False]),
    (pa.list_(pa.string()), [[], ["a", None, "b"]]),
    (pa.list_(pa.list_(pa.int64())), [[[1, 2], [], None]]),
    (
        pa.struct([("sum", pa.float64()), ("count", pa.int64())]),
        [{"sum": 1.5, "count": 2}, {"sum": None, "count": 0}],
    ),
    (
        pa.struct([("tags", pa.list_(pa.string())), ("inner", pa.struct([("x", pa.int8())]))]),
        [{"tags": ["a"], "inner": {"x": 1}}, {"tags": None, "inner": None}],
    ),
    (pa.map_(pa.string(), pa.int64()), [[("a", 1), ("b", None)]]),
    (pa.decimal128(10, 2), [Decimal("12.34")]),
    (pa.timestamp("us", tz="UTC"), [dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)]),
    (pa.date32(), [dt.date(2026, 1, 2)]),
    (
        TTL_INT,
        [{"value": 5, "ttl_timestamp": 1_700_000_000_000}, {"value": None, "ttl_timestamp": 0}],
    ),
]


@pytest.mark.parametrize(("arrow", "values"), CASES, ids=[str(c[0]) for c in CASES])
def test_round_trip_whole_and_self_delimiting(arrow: pa.DataType, values: list[Any]) -> None:
    codec = codec_for(arrow)
    for v in values:
        assert codec.decode(codec.encode(v)) == v
    out = bytearray()
    for v in values:
        codec.write(v, out)
    pos, decoded = 0, []
    data = bytes(out)
    while pos < len(data):
        v, pos = codec.read(data, pos)
        decoded.append(v)
    assert decoded == values
    # The stored form is what Arrow makes of the Python value.
    assert pa.array(values, arrow).to_pylist() == values


def test_struct_accepts_tuples_and_missing_fields() -> None:
    codec = codec_for(pa.struct([("a", pa.int64()), ("b", pa.string())]))
    assert codec.decode(codec.encode((1, "x"))) == {"a": 1, "b": "x"}
    assert codec.decode(codec.encode({"a": 1})) == {"a": 1, "b": None}


def test_ttl_envelope_puts_the_timestamp_first() -> None:
    assert is_ttl_struct(TTL_INT)
    assert not is_ttl_struct(pa.struct([("value", pa.int64()), ("other", pa.int64())]))
    data = codec_for(TTL_INT).encode({"value": 9, "ttl_timestamp": 42})
    assert data[:8] == (42).to_bytes(8, "little")


@pytest.mark.parametrize(
    ("key_type", "keys"),
    [
        (pa.string(), ["a", "ab", "", "b" * 200]),
        (pa.int64(), [0, 1, -1, 256]),
        (pa.binary(), [b"", b"a", b"ab"]),
    ],
)
def test_key_and_namespace_prefixes_never_overlap(key_type: pa.DataType, keys: list[Any]) -> None:
    layout = KeyLayout(key_type)
    prefixes = {
        (k, ns): layout.prefix(k, 3) + layout.namespace(ns) for k in keys for ns in ("", "w", "w1")
    }
    for (k, ns), p in prefixes.items():
        assert layout.split(p + b"tail") == (k, ns, len(p))
        for other, q in prefixes.items():
            if other != (k, ns):
                assert not q.startswith(p)


def test_key_group_bounds_and_prefix_successor() -> None:
    assert key_group_bounds(0, 127) == (b"\x00\x00", b"\x00\x80")
    assert key_group_bounds(32767) == (b"\x7f\xff", b"\x80\x00")
    assert prefix_successor(b"\x00\x01\xff") == b"\x00\x02"
    with pytest.raises(ValueError):
        prefix_successor(b"\xff")
