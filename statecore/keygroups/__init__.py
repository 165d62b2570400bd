"""Key groups: the unit of snapshot, restore and rescale.

- :mod:`~statecore.keygroups.murmur3`: Spark's ``hash()`` ported to Python (one key).
- :mod:`~statecore.keygroups.assignment`: :class:`KeyGroupRange` and Flink's assignment formulas.
- :mod:`~statecore.keygroups.arrow`: the same hash over a whole Arrow column (NumPy).
"""

from statecore.keygroups.arrow import assign_to_key_groups, spark_hash_array
from statecore.keygroups.assignment import (
    DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
    KeyGroupRange,
    assign_key_to_parallel_operator,
    assign_to_key_group,
    check_parallelism,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    key_groups_of,
)
from statecore.keygroups.murmur3 import SPARK_HASH_SEED, Key, spark_hash, spark_hash_int

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "SPARK_HASH_SEED",
    "Key",
    "KeyGroupRange",
    "spark_hash",
    "spark_hash_int",
    "spark_hash_array",
    "assign_to_key_group",
    "assign_to_key_groups",
    "assign_key_to_parallel_operator",
    "compute_key_group_range_for_operator_index",
    "compute_operator_index_for_key_group",
    "compute_default_max_parallelism",
    "check_parallelism",
    "key_groups_of",
]
