"""Copying a table's files into another table, as savepoint exports (and restoring them) do: in
parallel, server-side on one S3 endpoint, verified by the sizes in the Delta log.

:func:`copy_files` first lists the source table once (one listing request per 1,000 objects on
S3) and checks every file to copy against the Delta log's ``add.size``: a file that is missing
or of another size fails the copy with :class:`~statecore.errors.CorruptSnapshotError` naming
the table, version and file, before any byte is copied. The Delta log holds no per-file
checksum (an ``add`` action has the size and statistics only), so the size is what is checked;
the footer is not read. Then the files are copied from a pool of threads, each under a new name:

- **S3 to S3** (statecore talks to one S3 endpoint, ``AWS_ENDPOINT_URL``): a server-side copy,
  ``CopyObject``, or ``UploadPartCopy`` parts above 5 GB (:mod:`statecore.snapshot.s3_copy`);
  no byte passes through this process;
- **local to local**: a local file copy;
- **across filesystems** (an S3 warehouse exported to a local folder, or back): the bytes
  stream through this process, counted against the log's size.

Threads, not Spark executors: a copy is a wait on a request (a server-side copy moves no byte
here at all), so a few dozen threads keep S3 busy from one process, and a savepoint is taken
where no Spark session exists (the command line, an Airflow task). The first failure cancels
the copies not started and is raised once those under way have ended, so nothing is still
writing when the caller removes what was copied.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Protocol

import pyarrow.fs as pafs

from statecore.errors import CorruptSnapshotError, SnapshotWriteError
from statecore.snapshot.files import SnapshotFile
from statecore.snapshot.s3_copy import copy_object, s3_client
from statecore.snapshot.storage import S3Settings, is_s3, table_filesystem, throttling_hint
from statecore.snapshot.table import TableFile

__all__ = ["COPY_THREADS", "copy_files", "file_copier", "new_file_name", "source_sizes"]

COPY_THREADS = 16
"""Files copied at a time. Not tied to the cores: a copy is a wait on a request."""


class Partitioned(Protocol):
    """What a copy needs of a table's layout (:class:`~statecore.snapshot.rewrite.TableLayout`):
    the name of its partition column."""

    @property
    def partition(self) -> str: ...


_Copy = Callable[[str, str, int], None]
"""``copy(source path, target path, size)``, paths relative to their tables."""


def new_file_name(partition: str, value: int, prefix: str) -> str:
    """A new file's path in a table: ``<partition>=<value>/<prefix>-<random>.parquet``."""
    return f"{partition}={value}/{prefix}-{uuid.uuid4().hex[:16]}.parquet"


def source_sizes(uri: str) -> dict[str, int]:
    """The size of every file under the table at ``uri``, by its path relative to the table
    (one listing)."""
    fs, root = table_filesystem(uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise CorruptSnapshotError(
            f"snapshot table {uri} cannot be listed: {exc}{throttling_hint(exc)}"
        ) from exc
    return {
        info.path[len(root) :].lstrip("/"): int(info.size or 0)
        for info in infos
        if info.type == pafs.FileType.File
    }


def _check_sizes(uri: str, version: int | None, files: list[TableFile]) -> None:
    sizes = source_sizes(uri)
    for f in files:
        where = f"snapshot table {uri} version {version}: file {f.path}"
        size = sizes.get(f.path)
        if size is None:
            raise CorruptSnapshotError(f"{where} is missing")
        if size != f.size:
            raise CorruptSnapshotError(f"{where} has {size} bytes, the Delta log says {f.size}")


def file_copier(source_uri: str, target_uri: str, threads: int) -> _Copy:
    """How to copy one file from the table at ``source_uri`` to the one at ``target_uri``."""
    if is_s3(source_uri) and is_s3(target_uri):
        client = s3_client(S3Settings.from_env(), threads)
        source_base, target_base = source_uri.rstrip("/"), target_uri.rstrip("/")

        def server_side(source: str, target: str, size: int) -> None:
            copy_object(client, f"{source_base}/{source}", f"{target_base}/{target}", size)

        return server_side
    source_fs, source_root = table_filesystem(source_uri)
    target_fs, target_root = table_filesystem(target_uri)
    if isinstance(source_fs, pafs.LocalFileSystem) and isinstance(target_fs, pafs.LocalFileSystem):

        def local(source: str, target: str, size: int) -> None:
            source_fs.copy_file(f"{source_root}/{source}", f"{target_root}/{target}")

        return local

    def streamed(source: str, target: str, size: int) -> None:
        copied = 0
        with (
            source_fs.open_input_stream(f"{source_root}/{source}") as src,
            target_fs.open_output_stream(f"{target_root}/{target}") as dst,
        ):
            while chunk := src.read(1 << 22):
                dst.write(chunk)
                copied += len(chunk)
        if copied != size:
            raise CorruptSnapshotError(
                f"snapshot table {source_uri}: file {source} had {copied} bytes, the Delta "
                f"log says {size}"
            )

    return streamed


def copy_files(
    source_uri: str,
    target_uri: str,
    layout: Partitioned,
    files: Iterable[TableFile],
    *,
    prefix: str,
    version: int | None = None,
    threads: int = COPY_THREADS,
) -> list[SnapshotFile]:
    """Copy ``files`` (of ``version`` of the source) byte for byte into the table at
    ``target_uri``, under new names, ``threads`` at a time; each is checked first against
    the Delta log's size. The files written (not committed), in the order of ``files``."""
    files = list(files)
    if not files:
        return []
    _check_sizes(source_uri, version, files)
    names = [new_file_name(layout.partition, f.key_group, prefix) for f in files]
    copy = file_copier(source_uri, target_uri, threads)
    if not is_s3(target_uri):  # object stores have no folders
        fs, root = table_filesystem(target_uri)
        try:
            for value in sorted({f.key_group for f in files}):
                fs.create_dir(f"{root}/{layout.partition}={value}", recursive=True)
        except OSError as exc:
            raise SnapshotWriteError(
                f"snapshot table {target_uri} cannot be written: {exc}{throttling_hint(exc)}"
            ) from exc

    def one(f: TableFile, name: str) -> SnapshotFile:
        try:
            copy(f.path, name, f.size)
        except OSError as exc:
            raise SnapshotWriteError(
                f"snapshot table {source_uri} version {version}: file {f.path} cannot be "
                f"copied to {target_uri}/{name}: {exc}{throttling_hint(exc)}"
            ) from exc
        return SnapshotFile(
            path=name,
            key_group=f.key_group,
            rows=f.rows,
            size=f.size,
            modification_time=time.time_ns() // 1_000_000,
            # Row counts are all the committer needs; min/max statistics are an optimization.
            stats=f'{{"numRecords": {f.rows}}}',
        )

    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="statecore-copy") as pool:
        futures: list[Future[SnapshotFile]] = [
            pool.submit(one, f, name) for f, name in zip(files, names)
        ]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                error = future.exception() if future in done else None
                if error is not None:
                    raise error
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            raise  # the pool's exit waits for the copies under way
