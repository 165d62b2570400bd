"""Key groups and key-group-aligned partitions, computed natively in the JVM.

``key_group = pmod(hash(key), max_parallelism)`` is Spark's own ``hash()``; the operator index is
Flink's ``key_group * p // max_parallelism``. Spark's hash partitioner puts a row in
``pmod(hash(expr), p)``, so repartitioning on an expression whose value, for operator index
``i``, is an int whose Spark hash lands on ``i`` makes partition ``i`` hold exactly key-group
range ``i``, with no Python in the shuffle.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from statecore.errors import KeyTypeError
from statecore.keygroups import spark_hash_int

__all__ = ["KEY_GROUP_COLUMN", "key_column", "partition_ids", "align_to_key_groups"]

KEY_GROUP_COLUMN = "__statecore_key_group"


def key_column(df: DataFrame, key: str) -> Column:
    """The key column as a type whose Spark hash the Python port reproduces."""
    return F.expr(_key_sql(df, key))


def _key_sql(df: DataFrame, key: str) -> str:
    """:func:`key_column` as SQL."""
    if key not in df.columns:
        raise KeyTypeError(f"key column {key!r} is not in the input columns {df.columns}")
    data_type = df.schema[key].dataType
    quoted = "`" + key.replace("`", "``") + "`"
    if isinstance(data_type, T.StringType | T.BinaryType | T.LongType):
        return quoted
    if isinstance(data_type, T.IntegerType | T.ShortType | T.ByteType):
        return f"CAST({quoted} AS BIGINT)"
    raise KeyTypeError(
        f"key column {key!r} has type {data_type.simpleString()}, which cannot be hashed "
        "consistently between Spark and Python; use string, bigint/int or binary keys"
    )


def partition_ids(parallelism: int) -> list[int]:
    """For each operator index ``i``, the smallest int ``n`` with ``pmod(hash(n), p) == i``."""
    found: dict[int, int] = {}
    n = 0
    while len(found) < parallelism:
        found.setdefault(spark_hash_int(n) % parallelism, n)
        n += 1
    return [found[i] for i in range(parallelism)]


def align_to_key_groups(
    df: DataFrame,
    key: str,
    *,
    parallelism: int,
    max_parallelism: int,
    order_by: list[str] | None = None,
) -> DataFrame:
    """``df`` plus its key group, in ``parallelism`` partitions aligned to key-group ranges.

    Built from SQL expressions in one projection and a repartition by expression (each
    DataFrame step is a round trip to the JVM and an analysis of the plan, paid per
    micro-batch)."""
    ids = ", ".join(str(n) for n in partition_ids(parallelism))
    aligned = df.selectExpr(
        "*",
        f"CAST(pmod(hash({_key_sql(df, key)}), {max_parallelism}) AS INT) AS {KEY_GROUP_COLUMN}",
    ).repartition(
        parallelism,
        F.expr(
            f"element_at(array({ids}), "
            f"CAST(({KEY_GROUP_COLUMN} * {parallelism}) div {max_parallelism} + 1 AS INT))"
        ),
    )
    return aligned.sortWithinPartitions(*order_by) if order_by else aligned
