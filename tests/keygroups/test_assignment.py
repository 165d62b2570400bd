"""Key groups: Flink's formulas, and the Python port of Spark's hash() against Spark itself."""

from __future__ import annotations

import random

import pytest

from statecore.errors import ConfigError, KeyTypeError
from statecore.keygroups import (
    KeyGroupRange,
    assign_key_to_parallel_operator,
    assign_to_key_group,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    key_groups_of,
    spark_hash,
)


@pytest.mark.parametrize(
    "p,max_p", [(p, m) for m in (1, 7, 128, 300, 32768) for p in (1, 2, 3, 5, 7) if p <= m]
)
def test_ranges_partition_all_key_groups_and_agree_with_operator_index(p: int, max_p: int) -> None:
    ranges = key_groups_of(p, max_p)
    assert ranges[0].start == 0 and ranges[-1].end == max_p - 1
    for a, b in zip(ranges, ranges[1:]):
        assert b.start == a.end + 1
    for i, r in enumerate(ranges):
        for kg in (r.start, r.end):
            assert compute_operator_index_for_key_group(max_p, p, kg) == i


def test_flink_examples() -> None:
    # Values from Flink's KeyGroupRangeAssignment for maxP=128.
    assert compute_key_group_range_for_operator_index(128, 3, 0) == KeyGroupRange(0, 42)
    assert compute_key_group_range_for_operator_index(128, 3, 1) == KeyGroupRange(43, 85)
    assert compute_key_group_range_for_operator_index(128, 3, 2) == KeyGroupRange(86, 127)
    assert compute_default_max_parallelism(1) == 128
    assert compute_default_max_parallelism(100) == 256
    assert compute_default_max_parallelism(30000) == 32768


def test_range_value_type() -> None:
    r = KeyGroupRange(3, 5)
    assert list(r) == [3, 4, 5] and len(r) == 3 and 4 in r and 6 not in r
    assert len(KeyGroupRange.empty()) == 0
    assert r.intersection(KeyGroupRange(5, 9)) == KeyGroupRange(5, 5)
    assert len(r.intersection(KeyGroupRange(6, 9))) == 0


@pytest.mark.parametrize("p,max_p", [(0, 128), (129, 128), (1, 0), (1, 40000)])
def test_bad_parallelism(p: int, max_p: int) -> None:
    with pytest.raises(ConfigError):
        compute_key_group_range_for_operator_index(max_p, p, 0)


@pytest.mark.parametrize("key", [1.5, None, True, (1, 2), 2**64])
def test_keys_that_cannot_be_hashed_consistently(key: object) -> None:
    with pytest.raises(KeyTypeError, match="key"):
        assign_to_key_group(key, 128)


def test_assignment_is_stable_and_in_range() -> None:
    assert assign_to_key_group("user-1", 128) == spark_hash("user-1") % 128
    for i in range(1000):
        assert 0 <= assign_key_to_parallel_operator(f"k{i}", 128, 3) < 3


def _keys() -> dict[str, list[object]]:
    rng = random.Random(42)
    alphabet = "abcxyz0123-_ éü€😀"
    strings = ["", "user-1"] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(10_000)
    ]
    ints = (
        [0, -1, 1, 2**63 - 1, -(2**63)]
        + [rng.randint(-(2**63), 2**63 - 1) for _ in range(5_000)]
        + list(range(-2500, 2500))
    )
    binaries = [b"", b"\x00", b"\xff" * 7] + [
        rng.randbytes(rng.randint(0, 17)) for _ in range(10_000)
    ]
    return {"string": strings, "bigint": ints, "binary": binaries}


@pytest.mark.spark
def test_python_hash_equals_spark_hash(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    types = {"string": T.StringType(), "bigint": T.LongType(), "binary": T.BinaryType()}
    for name, keys in _keys().items():
        assert len(keys) >= 10_000
        schema = T.StructType(
            [T.StructField("i", T.IntegerType()), T.StructField("k", types[name])]
        )
        df = spark.createDataFrame(list(enumerate(keys)), schema)
        rows = df.select(
            "i", F.hash("k").alias("h"), F.pmod(F.hash("k"), F.lit(128)).alias("kg")
        ).collect()
        spark_hashes = {r.i: (r.h, r.kg) for r in rows}
        mismatches = [
            k
            for i, k in enumerate(keys)
            if spark_hashes[i] != (spark_hash(k), assign_to_key_group(k, 128))
        ]
        assert mismatches == [], f"{name}: {len(mismatches)} keys differ, e.g. {mismatches[:3]}"
