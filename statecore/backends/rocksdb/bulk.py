"""Restore by bulk load: snapshot rows become sorted SST files that RocksDB ingests whole.

Writing an SST file with ``SstFileWriter`` and handing it to ``ingest_external_file`` skips the
memtable, the write path and the compactions that per-key puts would cause. Keys start with the
key group, so key groups written in ascending order need no global sort: each key group's
entries are sorted on their own and appended to the current file. Only one key group's entries
are in memory at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import rocksdict

from statecore.backends.rocksdb.column import StateColumn
from statecore.descriptors import StateKind
from statecore.errors import CorruptSnapshotError

__all__ = ["ingest_key_groups", "rows_to_entries"]

_MAX_FILE_BYTES = 256 << 20


def rows_to_entries(
    column: StateColumn, key_group: int, rows: pa.Table
) -> list[tuple[bytes, bytes]]:
    """The sorted RocksDB entries of one key group's snapshot rows (last row wins on a tie)."""
    try:
        keys = rows.column("key").to_pylist()
        namespaces = rows.column("namespace").to_pylist()
        values = rows.column("value").to_pylist()
        user_keys: list[Any] = (
            rows.column("user_key").to_pylist()
            if column.kind is StateKind.MAP
            else [None] * len(keys)
        )
    except KeyError as exc:
        raise CorruptSnapshotError(
            f"state {column.name!r}, key group {key_group}: snapshot rows lack a column: {exc}"
        ) from exc
    entries: dict[bytes, bytes] = {}
    to_entry = column.to_entry
    try:
        for key, namespace, user_key, value in zip(keys, namespaces, user_keys, values):
            entry = to_entry(key_group, key, namespace, user_key, value)
            if entry is not None:
                entries[entry[0]] = entry[1]
    except (TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise CorruptSnapshotError(
            f"state {column.name!r}, key group {key_group}: a snapshot row does not match the "
            f"state's types: {exc}"
        ) from exc
    return sorted(entries.items())


def _by_key_group(chunks: Iterable[tuple[int, pa.Table]]) -> Iterator[tuple[int, list[pa.Table]]]:
    """Consecutive chunks of one key group, merged (files of one key group arrive together)."""
    current: int | None = None
    tables: list[pa.Table] = []
    for key_group, rows in chunks:
        if key_group != current and tables:
            assert current is not None
            yield current, tables
            tables = []
        current = key_group
        tables.append(rows)
    if tables:
        assert current is not None
        yield current, tables


def ingest_key_groups(
    cf: rocksdict.Rdict,
    column: StateColumn,
    chunks: Iterable[tuple[int, pa.Table]],
    *,
    directory: Path,
    options: rocksdict.Options,
) -> tuple[int, set[int]]:
    """Bulk-load ``(key_group, rows)`` chunks into ``cf``; ``(entries, key groups)`` loaded."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    loaded: set[int] = set()
    count = 0
    writer: rocksdict.SstFileWriter | None = None
    path: Path | None = None
    last: bytes | None = None

    def finish() -> None:
        nonlocal writer, path, last
        if writer is not None and path is not None:
            writer.finish()
            written.append(path)
        writer, path, last = None, None, None

    try:
        for key_group, tables in _by_key_group(chunks):
            entries: list[tuple[bytes, bytes]] = []
            for rows in tables:
                entries.extend(rows_to_entries(column, key_group, rows))
            if len(tables) > 1:
                entries = sorted(dict(entries).items())
            if not entries:
                continue
            loaded.add(key_group)
            if writer is not None and (
                entries[0][0] <= (last or b"") or writer.file_size() > _MAX_FILE_BYTES
            ):
                finish()
            if writer is None:
                path = directory / f"{column.name}-{uuid.uuid4().hex[:12]}.sst"
                writer = rocksdict.SstFileWriter(options)
                writer.open(str(path))
            for k, v in entries:
                writer[k] = v
            last = entries[-1][0]
            count += len(entries)
        finish()
        ingest = rocksdict.IngestExternalFileOptions()
        ingest.set_move_files(True)
        for sst in written:
            cf.ingest_external_file([str(sst)], ingest)
    finally:
        for sst in [*written, *([path] if path is not None else [])]:
            sst.unlink(missing_ok=True)
    return count, loaded
