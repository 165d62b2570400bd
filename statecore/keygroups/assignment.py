"""Key groups: the unit of snapshot, restore and rescale.

Every key hashes into one of ``max_parallelism`` key groups with Spark's own ``hash()`` (Murmur3
x86_32, seed 42), so the JVM assigns key groups natively in a shuffle and this module agrees with it
in Python. Parallel instance ``i`` of ``p`` owns a contiguous :class:`KeyGroupRange`; the formulas
are Flink's ``KeyGroupRangeAssignment``.

>>> compute_key_group_range_for_operator_index(128, 3, 1)
KeyGroupRange(start=43, end=85)
>>> compute_operator_index_for_key_group(128, 3, 85)
1
>>> compute_default_max_parallelism(200)
512
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from statecore.errors import ConfigError
from statecore.keygroups.murmur3 import spark_hash

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "assign_to_key_group",
    "assign_key_to_parallel_operator",
    "compute_key_group_range_for_operator_index",
    "compute_operator_index_for_key_group",
    "compute_default_max_parallelism",
    "check_parallelism",
    "key_groups_of",
]

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 128
UPPER_BOUND_MAX_PARALLELISM = 1 << 15


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """An inclusive range of key groups ``[start, end]``; empty when ``end < start``."""

    start: int
    end: int

    @classmethod
    def empty(cls) -> KeyGroupRange:
        return cls(0, -1)

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange.empty()


def check_parallelism(parallelism: int, max_parallelism: int) -> None:
    """Raise :class:`ConfigError` unless ``0 < parallelism <= max_parallelism <= 32768``."""
    if not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ConfigError(
            f"max parallelism {max_parallelism} must be in 1..{UPPER_BOUND_MAX_PARALLELISM}"
        )
    if not 0 < parallelism <= max_parallelism:
        raise ConfigError(
            f"parallelism {parallelism} must be in 1..{max_parallelism} (the max parallelism)"
        )


def assign_to_key_group(key: object, max_parallelism: int) -> int:
    """The key group of ``key``: ``pmod(spark_hash(key), max_parallelism)``."""
    return spark_hash(key) % max_parallelism


def assign_key_to_parallel_operator(key: object, max_parallelism: int, parallelism: int) -> int:
    """The operator index that owns ``key`` at ``parallelism``."""
    return compute_operator_index_for_key_group(
        max_parallelism, parallelism, assign_to_key_group(key, max_parallelism)
    )


def compute_key_group_range_for_operator_index(
    max_parallelism: int, parallelism: int, operator_index: int
) -> KeyGroupRange:
    """The key groups operator ``operator_index`` of ``parallelism`` owns (Flink's formula)."""
    check_parallelism(parallelism, max_parallelism)
    if not 0 <= operator_index < parallelism:
        raise ConfigError(f"operator index {operator_index} must be in 0..{parallelism - 1}")
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def compute_operator_index_for_key_group(
    max_parallelism: int, parallelism: int, key_group: int
) -> int:
    """The operator index owning ``key_group`` at ``parallelism`` (Flink's formula)."""
    return key_group * parallelism // max_parallelism


def compute_default_max_parallelism(parallelism: int) -> int:
    """``min(max(round_up_pow2(p + p // 2), 128), 32768)``, as Flink chooses it."""
    if parallelism <= 0:
        raise ConfigError(f"parallelism {parallelism} must be positive")
    wanted = parallelism + parallelism // 2
    pow2 = 1 << (wanted - 1).bit_length()
    return min(max(pow2, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


def key_groups_of(parallelism: int, max_parallelism: int) -> list[KeyGroupRange]:
    """The key-group range of every operator index at ``parallelism``."""
    return [
        compute_key_group_range_for_operator_index(max_parallelism, parallelism, i)
        for i in range(parallelism)
    ]
