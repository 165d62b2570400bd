"""Executor side: a table's files read back, a few at a time, in the order asked for.

A task restores its key groups by reading their files (:func:`read_table_files`). Each file is
one request and a decode; both wait without the GIL (a storage request, pyarrow's Parquet
decoder), so ``threads`` files are read at once and the first-byte latency of an object store is
paid once per ``threads`` files instead of once per file. The rows are handed back in the order of
the files asked for, whatever order the reads end in, so a restore applies exactly what a
sequential read applies; the first file that cannot be read (in that order) fails the restore,
naming it. A file gone because another tool VACUUMed the state table (delta-spark's and
deltalake's VACUUM log their runs as ``VACUUM START``/``VACUUM END`` commits; statecore's own
never deletes a file a retained checkpoint or savepoint needs) is named as such.

The number of threads is ``STATECORE_RESTORE_READ_THREADS`` in the environment of the process
that reads (a Spark executor's, as for the S3 settings; default :data:`READ_THREADS`; 1 reads one
file after another). At most ``threads`` files are read ahead of the one being applied.
"""

from __future__ import annotations

import functools
import json
import os
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from statecore.errors import ConfigError, CorruptSnapshotError
from statecore.snapshot.storage import table_filesystem, throttling_hint

__all__ = ["READ_THREADS", "READ_THREADS_ENV", "TableFile", "read_table_files", "read_threads"]

READ_THREADS = 4
"""Files a task reads at once when it restores, by default (as it writes from 4 threads,
:data:`~statecore.snapshot.files.WRITE_THREADS`): a read is mostly a wait for storage."""

READ_THREADS_ENV = "STATECORE_RESTORE_READ_THREADS"

_THREADED_DECODE_BYTES = 1 << 20  # smaller files decode faster in one thread


@dataclass(frozen=True)
class TableFile:
    """A committed file of one key group at some table version."""

    path: str
    key_group: int
    rows: int
    size: int


def read_threads(env: Mapping[str, str] | None = None) -> int:
    """The threads a restore reads from: ``STATECORE_RESTORE_READ_THREADS`` of ``env`` (this
    process's environment by default), else :data:`READ_THREADS`.

    >>> read_threads({}), read_threads({"STATECORE_RESTORE_READ_THREADS": "16"})
    (4, 16)
    """
    text = (os.environ if env is None else env).get(READ_THREADS_ENV, "").strip()
    if not text:
        return READ_THREADS
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ConfigError(
            f"{READ_THREADS_ENV}={text!r}: the threads a restore reads its files from must be a "
            "whole number of at least 1 (1 reads one file after another)"
        )
    return threads


def read_table_files(
    uri: str, files: Iterable[TableFile], *, label: str, threads: int | None = None
) -> Iterator[tuple[TableFile, pa.Table]]:
    """Each file of the table at ``uri`` with its rows (without the partition column), in the
    order of ``files``, read from ``threads`` threads (default :func:`read_threads`).

    A file is read in one request into memory and decoded there: key-group files are small,
    and reading the footer first, then the columns, would read most of each file twice. It is
    decoded as one Parquet file (``pq.read_table`` would also load ``pyarrow.dataset``), a small
    one in its reading thread. A file that is missing or unreadable raises
    :class:`~statecore.errors.CorruptSnapshotError` naming it, after the files before it were
    handed back; no further file is started, and the reads under way end before it propagates.
    """
    todo = list(files)
    threads = min(read_threads() if threads is None else max(1, threads), len(todo))
    fs, root = table_filesystem(uri)
    read = functools.partial(_read_file, fs, root, label)
    if threads <= 1:
        for f in todo:
            yield f, read(f)
        return
    pending: deque[tuple[TableFile, Future[pa.Table]]] = deque()
    with ThreadPoolExecutor(threads, thread_name_prefix="statecore-restore") as pool:
        try:
            for f in todo:
                if len(pending) >= threads:
                    done, future = pending.popleft()
                    yield done, future.result()
                pending.append((f, pool.submit(read, f)))
            while pending:
                done, future = pending.popleft()
                yield done, future.result()
        finally:  # failed, or the reader stopped early: start nothing more
            for _, future in pending:
                future.cancel()


def _read_file(fs: pafs.FileSystem, root: str, label: str, f: TableFile) -> pa.Table:
    try:
        with fs.open_input_file(f"{root}/{f.path}") as source:
            data = source.read()
        return pq.ParquetFile(pa.BufferReader(data)).read(
            use_threads=len(data) >= _THREADED_DECODE_BYTES
        )
    except (OSError, pa.ArrowInvalid) as exc:
        hint = _vacuum_hint(fs, root) if isinstance(exc, FileNotFoundError) else ""
        raise CorruptSnapshotError(
            f"{label}, key group {f.key_group}: file {f.path} is missing or unreadable: {exc}"
            f"{hint or throttling_hint(exc)}"
        ) from exc


def _vacuum_hint(fs: pafs.FileSystem, root: str) -> str:
    """Why a file of the table at ``root`` may be gone: the newest VACUUM another tool logged
    in its Delta log (``""``: none logged, or the log cannot be listed)."""
    try:
        entries = fs.get_file_info(pafs.FileSelector(f"{root}/_delta_log"))
    except OSError:
        return ""
    commits = sorted((e.path for e in entries if e.path.endswith(".json")), reverse=True)
    for path in commits:
        try:
            with fs.open_input_stream(path) as stream:
                lines = stream.read().decode().splitlines()
        except OSError:
            continue
        for line in lines:
            info = json.loads(line).get("commitInfo") if line.strip() else None
            if isinstance(info, dict) and str(info.get("operation", "")).startswith("VACUUM"):
                version = int(path.rsplit("/", 1)[-1].removesuffix(".json"))
                return (
                    f" (another tool VACUUMed this state table: {info['operation']} at version "
                    f"{version}; a VACUUM of state tables below what a retained checkpoint or "
                    "savepoint needs deletes its files: use `statecore retention`)"
                )
    return ""
