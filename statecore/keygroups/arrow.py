"""Key groups of a whole Arrow column at once: Spark's Murmur3 ``hash()`` in NumPy.

The same function as :func:`statecore.keygroups.assign_to_key_group`, one NumPy pass per 4-byte
word of the longest key instead of a Python loop per key, for rewriting stored state into another
max parallelism.

>>> import pyarrow as pa
>>> from statecore.keygroups import assign_to_key_group
>>> keys = ["user-1", "", "ü", "a-much-longer-key"]
>>> assign_to_key_groups(pa.array(keys), 256).tolist() == [assign_to_key_group(k, 256)
...                                                       for k in keys]
True
>>> assign_to_key_groups(pa.array([7, -1], pa.int64()), 128).tolist()
[11, 41]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from statecore.errors import KeyTypeError
from statecore.keygroups.assignment import check_parallelism
from statecore.keygroups.murmur3 import SPARK_HASH_SEED

__all__ = ["assign_to_key_groups", "spark_hash_array"]

U32 = npt.NDArray[np.uint32]


def _rotl(x: U32, r: int) -> U32:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: U32) -> U32:
    k1 = k1 * np.uint32(0xCC9E2D51)
    k1 = _rotl(k1, 15)
    return k1 * np.uint32(0x1B873593)


def _mix_h1(h1: U32, k1: U32) -> U32:
    h1 = _rotl(h1 ^ k1, 13)
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: U32, length: U32) -> npt.NDArray[np.int32]:
    h1 = h1 ^ length
    h1 = h1 ^ (h1 >> np.uint32(16))
    h1 = h1 * np.uint32(0x85EBCA6B)
    h1 = h1 ^ (h1 >> np.uint32(13))
    h1 = h1 * np.uint32(0xC2B2AE35)
    h1 = h1 ^ (h1 >> np.uint32(16))
    return h1.view(np.int32)


def _hash_longs(values: npt.NDArray[np.int64], seed: int) -> npt.NDArray[np.int32]:
    bits = values.view(np.uint64)
    low = (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    high = (bits >> np.uint64(32)).astype(np.uint32)
    h1 = np.full(len(values), seed, np.uint32)
    h1 = _mix_h1(h1, _mix_k1(low))
    h1 = _mix_h1(h1, _mix_k1(high))
    return _fmix(h1, np.full(len(values), 8, np.uint32))


def _hash_binary(array: pa.Array, seed: int) -> npt.NDArray[np.int32]:
    # Spark's hashUnsafeBytes: little-endian 4-byte words, then each trailing byte on its own,
    # sign-extended, mixed as a whole block.
    offsets_type = (
        np.int64
        if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
        else np.int32
    )
    _, offsets_buffer, data_buffer = array.buffers()
    offsets: npt.NDArray[np.int64] = np.frombuffer(offsets_buffer, offsets_type)[
        array.offset : array.offset + len(array) + 1
    ].astype(np.int64)
    data = (
        np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    )
    starts = offsets[:-1]
    lengths = offsets[1:] - offsets[:-1]
    words = lengths // 4
    h1 = np.full(len(array), seed, np.uint32)
    for j in range(int(words.max(initial=0))):
        rows = np.nonzero(words > j)[0]
        at = starts[rows] + 4 * j
        word = (
            data[at].astype(np.uint32)
            | data[at + 1].astype(np.uint32) << np.uint32(8)
            | data[at + 2].astype(np.uint32) << np.uint32(16)
            | data[at + 3].astype(np.uint32) << np.uint32(24)
        )
        h1[rows] = _mix_h1(h1[rows], _mix_k1(word))
    for t in range(3):
        rows = np.nonzero(lengths % 4 > t)[0]
        byte = data[starts[rows] + 4 * words[rows] + t].view(np.int8).astype(np.int32)
        h1[rows] = _mix_h1(h1[rows], _mix_k1(byte.view(np.uint32)))
    return _fmix(h1, lengths.astype(np.uint32))


def spark_hash_array(
    keys: pa.Array | pa.ChunkedArray, seed: int = SPARK_HASH_SEED
) -> npt.NDArray[np.int32]:
    """Spark SQL's ``hash()`` of every key of a string, binary or integer column."""
    array = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    if array.null_count:
        raise KeyTypeError(f"a key column holds {array.null_count} null keys")
    with np.errstate(over="ignore"):
        if pa.types.is_integer(array.type) and not pa.types.is_uint64(array.type):
            values = array.cast(pa.int64()).to_numpy(zero_copy_only=False)
            return _hash_longs(np.ascontiguousarray(values, np.int64), seed)
        if any(
            check(array.type)
            for check in (
                pa.types.is_string,
                pa.types.is_large_string,
                pa.types.is_binary,
                pa.types.is_large_binary,
            )
        ):
            return _hash_binary(array, seed)
    raise KeyTypeError(
        f"keys of type {array.type} cannot be hashed consistently with Spark; supported key "
        "types: string, binary, 64-bit integer"
    )


def assign_to_key_groups(
    keys: pa.Array | pa.ChunkedArray, max_parallelism: int
) -> npt.NDArray[np.int32]:
    """The key group of every key: ``pmod(hash(key), max_parallelism)``."""
    check_parallelism(1, max_parallelism)
    hashes = spark_hash_array(keys).astype(np.int64)
    return np.mod(hashes, max_parallelism).astype(np.int32)
