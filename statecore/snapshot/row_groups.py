"""One key's rows from key-group files, reading only the row groups that can hold the key.

Snapshot files are written sorted by key in row groups of about
:data:`~statecore.snapshot.files.ROW_GROUP_BYTES` (:mod:`statecore.snapshot.files`), and every
row group's footer statistics carry the minimum and maximum of its ``key`` column. A point
lookup reads a file's footer (one request for its last 64 KiB, a second for the rest of a
larger footer; kept for the next lookups of the same file) and then only the row groups whose
key range holds the key: about one, a few hundred KiB, whatever the file's size.

Nothing depends on the sort for correctness: a row group is skipped only when its statistics
say the key is outside it, so a file written before keys were sorted (its row groups' ranges
overlap), a row group without statistics or a key that the statistics cannot compare is read,
as is a whole file small enough (:data:`WHOLE_FILE_BYTES`) that one request for all of it costs
less than two for a part.

Every byte is counted as it is read (:class:`KeyRows.bytes_read`), footer included.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from statecore.errors import CorruptSnapshotError
from statecore.snapshot.storage import table_filesystem, throttling_hint
from statecore.snapshot.table import TableFile

__all__ = ["FOOTER_READ", "WHOLE_FILE_BYTES", "KeyRows", "candidate_row_groups", "read_key_rows"]

WHOLE_FILE_BYTES = 1 << 20
"""Files up to this size are read whole, in one request: reading the footer first would cost a
second request to save less than a request's worth of time."""

FOOTER_READ = 64 << 10
"""The bytes read from a file's end to find its footer, as Parquet readers do: one request
for the footer of any file of up to several hundred row groups."""

_MAGIC = b"PAR1"
_FOOTERS: OrderedDict[tuple[str, str, int], pq.FileMetaData] = OrderedDict()
_FOOTERS_SIZE = 256
_FOOTERS_LOCK = threading.Lock()


@dataclass(frozen=True)
class KeyRows:
    """The rows read for a key (every row of the key, and others of the same row groups)."""

    rows: list[pa.Table]
    files_read: int
    bytes_read: int
    row_groups_read: int


def candidate_row_groups(metadata: pq.FileMetaData, key: Any) -> list[int]:
    """The row groups of a file that may hold ``key``: all but those whose ``key`` statistics
    (minimum and maximum) exclude it."""
    leaves = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    if "key" not in leaves:
        return list(range(metadata.num_row_groups))
    leaf = leaves.index("key")
    out = []
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        if group.num_rows == 0:
            continue
        stats = group.column(leaf).statistics
        try:
            outside = (
                stats is not None and stats.has_min_max and not (stats.min <= key <= stats.max)
            )
        except TypeError:  # a key the statistics cannot compare: read the group
            outside = False
        if not outside:
            out.append(g)
    return out


def read_key_rows(uri: str, files: Iterable[TableFile], key: Any, *, label: str) -> KeyRows:
    """The rows of ``files`` (of the table at ``uri``) that may hold ``key``: the row groups
    whose statistics do not exclude it (a small file whole), with the bytes read to find them."""
    fs, root = table_filesystem(uri)
    parts: list[pa.Table] = []
    files_read = bytes_read = groups_read = 0
    for f in files:
        counted = _CountedFile()
        try:
            with fs.open_input_file(f"{root}/{f.path}") as source:
                counted.source = source
                if f.size <= WHOLE_FILE_BYTES:
                    data = counted.read()
                    parquet = pq.ParquetFile(pa.BufferReader(data))
                    groups = list(range(parquet.metadata.num_row_groups))
                else:
                    parquet = _parquet(uri, f, counted)
                    groups = candidate_row_groups(parquet.metadata, key)
                if groups:
                    parts.append(parquet.read_row_groups(groups, use_threads=False))
        except (OSError, pa.ArrowInvalid) as exc:
            raise CorruptSnapshotError(
                f"{label}, key group {f.key_group}: file {f.path} is missing or unreadable: {exc}"
                f"{throttling_hint(exc)}"
            ) from exc
        files_read += 1
        bytes_read += counted.bytes_read
        groups_read += len(groups)
    return KeyRows(parts, files_read, bytes_read, groups_read)


def _parquet(uri: str, f: TableFile, counted: _CountedFile) -> pq.ParquetFile:
    """``f`` opened through ``counted``, its footer read once for many lookups (a committed
    file never changes: its name is new for every write, and its size is in the key)."""
    cache_key = (uri, f.path, f.size)
    with _FOOTERS_LOCK:
        metadata = _FOOTERS.get(cache_key)
        if metadata is not None:
            _FOOTERS.move_to_end(cache_key)
    if metadata is None:
        metadata = _footer(counted, f.size)
        with _FOOTERS_LOCK:
            _FOOTERS[cache_key] = metadata
            while len(_FOOTERS) > _FOOTERS_SIZE:
                _FOOTERS.popitem(last=False)
    return pq.ParquetFile(pa.PythonFile(counted, mode="r"), metadata=metadata)


def _footer(counted: _CountedFile, size: int) -> pq.FileMetaData:
    """The footer of a Parquet file of ``size`` bytes: its last :data:`FOOTER_READ` bytes in
    one read, and the rest of a larger footer in a second (not the whole footer again)."""
    tail_size = min(size, FOOTER_READ)
    counted.seek(size - tail_size)
    tail = counted.read(tail_size)
    if len(tail) != tail_size or tail[-4:] != _MAGIC:
        raise pa.ArrowInvalid(f"no Parquet footer in the last {tail_size} bytes of {size}")
    length = struct.unpack("<I", tail[-8:-4])[0] + 8
    if length > size - len(_MAGIC):
        raise pa.ArrowInvalid(f"a footer of {length} bytes in a file of {size}")
    if length > tail_size:
        counted.seek(size - length)
        tail = counted.read(length - tail_size) + tail
    return pq.read_metadata(pa.BufferReader(_MAGIC + tail[-length:]))


class _CountedFile:
    """A readable file that counts the bytes read from the file it wraps (``source``)."""

    def __init__(self) -> None:
        self.source: pa.NativeFile | None = None
        self.bytes_read = 0
        self.closed = False

    def _file(self) -> pa.NativeFile:
        if self.source is None:
            raise ValueError("no file to read")
        return self.source

    def read(self, size: int = -1) -> bytes:
        data = bytes(self._file().read(None if size is None or size < 0 else size))
        self.bytes_read += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._file().seek(offset, whence))

    def tell(self) -> int:
        return int(self._file().tell())

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True
