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
>>> spark_hash("user-1"), spark_hash(7), spark_hash(b"\\x00")
(-802825514, 1293116811, -783713497)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from statecore.errors import ConfigError, KeyTypeError

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "SPARK_HASH_SEED",
    "Key",
    "KeyGroupRange",
    "spark_hash",
    "spark_hash_int",
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
SPARK_HASH_SEED = 42

Key = str | int | bytes
"""The key types whose hash is defined identically in Python and in Spark."""

_MASK = 0xFFFFFFFF
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT_WORDS = struct.Struct("<I")


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


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK
    k1 = _rotl(k1, 15)
    return (k1 * 0x1B873593) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def _hash_int(value: int, seed: int) -> int:
    return _fmix(_mix_h1(seed & _MASK, _mix_k1(value & _MASK)), 4)


def _hash_long(value: int, seed: int) -> int:
    h1 = _mix_h1(seed & _MASK, _mix_k1(value & _MASK))
    h1 = _mix_h1(h1, _mix_k1((value >> 32) & _MASK))
    return _fmix(h1, 8)


def _hash_bytes(data: bytes, seed: int) -> int:
    # Spark's Murmur3_x86_32.hashUnsafeBytes: little-endian ints, then each trailing byte
    # (sign-extended) mixed as a whole block.
    length = len(data)
    aligned = length - length % 4
    h1 = seed & _MASK
    for (word,) in _INT_WORDS.iter_unpack(data[:aligned]) if aligned else ():
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _MASK))
    return _fmix(h1, length)


def spark_hash(key: object, seed: int = SPARK_HASH_SEED) -> int:
    """Spark SQL's ``hash(key)`` for a ``str`` (StringType), ``int`` (LongType) or ``bytes`` key.

    Python's built-in ``hash()`` is randomized per process and must never decide a key group.
    """
    if isinstance(key, str):
        return _hash_bytes(key.encode("utf-8"), seed)
    if isinstance(key, bool):
        raise KeyTypeError(
            "bool keys hash differently in Spark (BooleanType) and Python (int); "
            "use an int or str key"
        )
    if isinstance(key, int):
        if not _INT64_MIN <= key <= _INT64_MAX:
            raise KeyTypeError(f"int key {key} does not fit Spark's LongType (64-bit)")
        return _hash_long(key, seed)
    if isinstance(key, bytes | bytearray | memoryview):
        return _hash_bytes(bytes(key), seed)
    raise KeyTypeError(
        f"key {key!r} of type {type(key).__name__} cannot be hashed consistently with Spark; "
        "supported key types: str, int (64-bit), bytes"
    )


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark SQL's ``hash()`` of a 32-bit IntegerType value."""
    return _hash_int(value, seed)


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

