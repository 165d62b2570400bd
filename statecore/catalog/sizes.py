"""The compact form of a table version's key-group sizes in the catalog.

A table version knows each of its key groups' ``(rows, bytes)``: 32,768 entries at the largest
max parallelism. As a JSON object (``{"<key group>": [rows, bytes]}``, schema versions 1-9) that
was ~880 KB per table per checkpoint, built and parsed entry by entry. It is stored as three
integer arrays instead (the key groups as differences from the previous one, which are mostly
1, then the rows, then the bytes), 64-bit little-endian, compressed with zlib, behind a format
byte:

>>> sizes = {0: (6, 480), 7: (4, 320)}
>>> decode_sizes(encode_sizes(sizes)) == sizes
True
"""

from __future__ import annotations

import sys
import zlib
from array import array
from collections.abc import Mapping
from itertools import accumulate, chain

import numpy as np

from statecore.errors import CatalogError

__all__ = ["FORMAT", "decode_sizes", "encode_sizes"]

FORMAT = 1
"""The format byte of :func:`encode_sizes` (a new layout is a new format and a migration)."""


def encode_sizes(sizes: Mapping[int, tuple[int, int]]) -> bytes:
    """``sizes`` (key group -> ``(rows, bytes)``) as the catalog stores them."""
    n = len(sizes)
    key_groups = np.fromiter(sizes.keys(), dtype=np.int64, count=n)
    numbers = np.fromiter(chain.from_iterable(sizes.values()), dtype=np.int64, count=2 * n)
    numbers = numbers.reshape(n, 2)
    if n > 1 and not bool(np.all(key_groups[1:] > key_groups[:-1])):
        order = np.argsort(key_groups, kind="stable")
        key_groups, numbers = key_groups[order], numbers[order]
    values = np.concatenate([np.diff(key_groups, prepend=0), numbers[:, 0], numbers[:, 1]])
    return bytes([FORMAT]) + zlib.compress(values.astype("<i8").tobytes(), 1)


def decode_sizes(data: bytes) -> dict[int, tuple[int, int]]:
    """The sizes :func:`encode_sizes` stored in ``data``."""
    if not data or data[0] != FORMAT:
        raise CatalogError(
            f"key-group sizes in format {data[:1].hex() or 'none'}: this statecore reads "
            f"format {FORMAT}; upgrade statecore"
        )
    values = array("q")
    values.frombytes(zlib.decompress(data[1:]))
    if sys.byteorder != "little":
        values.byteswap()
    n = len(values) // 3
    key_groups = accumulate(values[:n])
    return dict(zip(key_groups, zip(values[n : 2 * n], values[2 * n :], strict=True), strict=True))
