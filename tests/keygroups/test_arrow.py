"""Key groups of Arrow columns equal the per-key Python port (itself tested equal to Spark)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from statecore.errors import KeyTypeError
from statecore.keygroups import assign_to_key_group, spark_hash
from statecore.keygroups.arrow import assign_to_key_groups, spark_hash_array

rng = random.Random(42)
STRINGS = [
    "",
    "a",
    "ab",
    "abc",
    "abcd",
    "user-1",
    "ü€𝄞",
    *(
        "".join(
            chr(rng.choice([rng.randrange(32, 127), rng.randrange(160, 0x2FFF)]))
            for _ in range(rng.randrange(0, 25))
        )
        for _ in range(3000)
    ),
]
INTS = [
    0,
    1,
    -1,
    7,
    (1 << 63) - 1,
    -(1 << 63),
    *(rng.randrange(-(1 << 63), 1 << 63) for _ in range(3000)),
]
BYTES = [
    b"",
    b"\x00",
    b"\xff\x80\x7f",
    *(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 14))) for _ in range(2000)),
]


@pytest.mark.parametrize(
    "keys, arrow_type",
    [
        (STRINGS, pa.string()),
        (STRINGS, pa.large_string()),
        (INTS, pa.int64()),
        (BYTES, pa.binary()),
        (BYTES, pa.large_binary()),
    ],
)
def test_hash_of_a_column_equals_the_port(keys: list[object], arrow_type: pa.DataType) -> None:
    column = pa.array(keys, arrow_type)
    assert spark_hash_array(column).tolist() == [spark_hash(k) for k in keys]
    assert assign_to_key_groups(column, 300).tolist() == [assign_to_key_group(k, 300) for k in keys]


def test_slices_and_chunks() -> None:
    column = pa.array(STRINGS)
    assert spark_hash_array(column.slice(3, 50)).tolist() == [spark_hash(k) for k in STRINGS[3:53]]
    chunked = pa.chunked_array([column.slice(0, 10), column.slice(10, 20)])
    assert spark_hash_array(chunked).tolist() == [spark_hash(k) for k in STRINGS[:30]]


def test_small_ints_widen_like_spark_longs() -> None:
    assert spark_hash_array(pa.array([5, -3], pa.int32())).tolist() == [
        spark_hash(5),
        spark_hash(-3),
    ]


def test_unsupported_keys() -> None:
    with pytest.raises(KeyTypeError, match="double"):
        spark_hash_array(pa.array([1.5]))
    with pytest.raises(KeyTypeError, match="null"):
        spark_hash_array(pa.array(["a", None]))
