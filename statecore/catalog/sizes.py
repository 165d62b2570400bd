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

import zlib
from collections.abc import Mapping
from itertools import chain

import numpy as np

from statecore.errors import CatalogError

__all__ = ["FORMAT", "DecodedSizes", "decode_sizes", "encode_sizes"]

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


class DecodedSizes(dict[int, tuple[int, int]]):
    """Sizes :func:`decode_sizes` read, every number checked not negative as an array (a
    :class:`~statecore.catalog.records.TableVersion` need not check them one by one)."""


def decode_sizes(data: bytes) -> DecodedSizes:
    """The sizes :func:`encode_sizes` stored in ``data``."""
    if not data or data[0] != FORMAT:
        raise CatalogError(
            f"key-group sizes in format {data[:1].hex() or 'none'}: this statecore reads "
            f"format {FORMAT}; upgrade statecore"
        )
    values = np.frombuffer(zlib.decompress(data[1:]), dtype="<i8")
    n = len(values) // 3
    if len(values) != 3 * n:
        raise CatalogError(f"key-group sizes of {len(values)} numbers, not three arrays")
    key_groups = np.cumsum(values[:n])
    if n and int(values.min()) < 0:
        raise CatalogError("key-group sizes hold a negative number")
    return DecodedSizes(
        zip(
            key_groups.tolist(),
            zip(values[n : 2 * n].tolist(), values[2 * n :].tolist(), strict=True),
            strict=True,
        )
    )
