"""Exports of a savepoint on the S3 test server: copied in parallel and server-side, against
the one-file-at-a-time copy it replaced, in one run.

It starts the test S3 server (moto, :mod:`tests.object_store.s3_server`, as the tests do), writes
checkpoint 1 of a job whose ValueState has one file in each of ``--files`` key groups (max
parallelism 1,024), and exports it (``take_savepoint``) into fresh folders, alternating:

- **sequential** (the baseline): the copy as it was before issue 35, kept here verbatim
  (:func:`sequential_copy_files`): per file a HEAD and a Parquet footer read of the source,
  a folder created, then the copy, one file after another;
- **parallel, 1 thread** (information): today's :func:`~statecore.snapshot.copies.copy_files`
  with one thread: one listing of the table, then the server-side copies one at a time;
- **parallel** (today's export): the same with its default pool.

Every export is restored nowhere; each is read back (row count and checksum per state) and must
equal the checkpoint. Target (issue 35): the export at least 5x faster than the sequential copy.
Run: ``python -m benchmarks.export`` (records a section of ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import functools
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from benchmarks.report import machine_info, replace_section
from tests.object_store.process import running_s3_server

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "RESULTS.md"
HEADING = "## Savepoint export on S3 (issue 35)"
JOB = "bench"
MAX_PARALLELISM = 1024


def verify_file(uri: str, version: int | None, f: Any) -> None:
    """The check before issue 35 (verbatim): size and a Parquet footer read per file."""
    from statecore.errors import CorruptSnapshotError
    from statecore.snapshot.storage import table_filesystem, throttling_hint

    fs, root = table_filesystem(uri)
    where = f"snapshot table {uri} version {version}: file {f.path}"
    try:
        info = fs.get_file_info(f"{root}/{f.path}")
        if info.type != pafs.FileType.File:
            raise CorruptSnapshotError(f"{where} is missing")
        if info.size != f.size:
            raise CorruptSnapshotError(
                f"{where} has {info.size} bytes, the Delta log says {f.size}"
            )
        with fs.open_input_file(f"{root}/{f.path}") as source:
            rows = pq.ParquetFile(source).metadata.num_rows
    except (OSError, pa.ArrowInvalid) as exc:
        raise CorruptSnapshotError(f"{where} is unreadable: {exc}{throttling_hint(exc)}") from exc
    if rows != f.rows:
        raise CorruptSnapshotError(f"{where} holds {rows} rows, the Delta log says {f.rows}")


def sequential_copy_files(
    source_uri: str,
    target_uri: str,
    layout: Any,
    files: Iterable[Any],
    *,
    prefix: str,
    version: int | None = None,
) -> list[Any]:
    """``copy_files`` before issue 35 (verbatim but for imports): one file after another."""
    from statecore.errors import CorruptSnapshotError, SnapshotWriteError
    from statecore.snapshot.copies import new_file_name
    from statecore.snapshot.files import SnapshotFile
    from statecore.snapshot.storage import table_filesystem, throttling_hint

    source_fs, source_root = table_filesystem(source_uri)
    target_fs, target_root = table_filesystem(target_uri)
    same_fs = source_fs is target_fs or (  # one S3 endpoint copies server-side
        type(source_fs) is type(target_fs) and isinstance(source_fs, pafs.LocalFileSystem)
    )
    out = []
    for f in files:
        verify_file(source_uri, version, f)
        relative = new_file_name(layout.partition, f.key_group, prefix)
        source, target = f"{source_root}/{f.path}", f"{target_root}/{relative}"
        try:
            target_fs.create_dir(f"{target_root}/{layout.partition}={f.key_group}", recursive=True)
        except OSError as exc:  # e.g. a bucket that does not exist
            raise SnapshotWriteError(
                f"snapshot table {target_uri} cannot be written: {exc}{throttling_hint(exc)}"
            ) from exc
        try:
            if same_fs:
                source_fs.copy_file(source, target)
            else:
                with (
                    source_fs.open_input_stream(source) as src,
                    target_fs.open_output_stream(target) as dst,
                ):
                    while chunk := src.read(1 << 22):
                        dst.write(chunk)
        except OSError as exc:
            raise CorruptSnapshotError(
                f"snapshot table {source_uri}: file {f.path} cannot be copied to {target_uri}: "
                f"{exc}{throttling_hint(exc)}"
            ) from exc
        stats = f'{{"numRecords": {f.rows}}}'
        out.append(
            SnapshotFile(
                path=relative,
                key_group=f.key_group,
                rows=f.rows,
                size=f.size,
                modification_time=time.time_ns() // 1_000_000,
                stats=stats,
            )
        )
    return out


def build(config: Any, files: int) -> None:
    """Checkpoint 1 of job ``bench``: a ValueState with one key in each of ``files`` key
    groups, so one file each."""
    from statecore.keygroups import assign_to_key_group
    from tests.ops.statebuilder import Table, value_rows, write_checkpoint

    keys: dict[int, str] = {}
    i = 0
    while len(keys) < files:
        key = f"key-{i}"
        keys.setdefault(assign_to_key_group(key, MAX_PARALLELISM), key)
        i += 1
    values = {key: float(n) for n, key in enumerate(keys.values())}
    write_checkpoint(
        config,
        JOB,
        1,
        {"total": Table(value_rows(values))},
        parallelism=1,
        max_parallelism=MAX_PARALLELISM,
    )


def export(config: Any, name: str, copy: Callable[..., Any]) -> tuple[float, Any]:
    """Seconds to export checkpoint 1 as savepoint ``name`` with ``copy`` as the file copy."""
    from statecore.catalog import Catalog
    from statecore.ops.savepoint import take_savepoint

    with Catalog.connect(config.catalog_url) as catalog:
        with mock.patch("statecore.ops.savepoint.copy_files", copy):
            started = time.perf_counter()
            saved = take_savepoint(config, catalog, JOB, name=name, checkpoint_id=1)
            return time.perf_counter() - started, saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-record", action="store_true", help="print, do not write RESULTS.md")
    args = parser.parse_args(argv)

    from statecore.catalog import Catalog
    from statecore.checkpoint.points import checkpoint_point
    from statecore.config import StatecoreConfig
    from statecore.query.diff import checksums
    from statecore.snapshot.copies import COPY_THREADS, copy_files

    machine = machine_info()
    variants: dict[str, Callable[..., Any]] = {
        "sequential (before issue 35)": sequential_copy_files,
        "parallel, 1 thread": functools.partial(copy_files, threads=1),
        f"parallel, {COPY_THREADS} threads (the export)": copy_files,
    }
    times: dict[str, list[float]] = {v: [] for v in variants}
    with running_s3_server(["warehouse"], environ=True), tempfile.TemporaryDirectory() as home:
        config = StatecoreConfig.resolve(
            home=home, warehouse=f"s3://warehouse/bench-{secrets.token_hex(3)}", env={}
        )
        build(config, args.files)
        with Catalog.connect(config.catalog_url) as catalog:
            point = checkpoint_point(catalog, JOB, 1)
        [table] = point.tables
        expected = [(c.rows, c.checksum) for c in checksums(point)]
        print(f"checkpoint 1: {len(table.key_groups)} files, {table.bytes:,} bytes", flush=True)
        for repeat in range(args.repeats):
            order = list(variants) if repeat % 2 == 0 else list(reversed(variants))
            for n, variant in enumerate(order):
                seconds, saved = export(config, f"r{repeat}-v{n}", variants[variant])
                assert [(c.rows, c.checksum) for c in checksums(saved)] == expected, variant
                times[variant].append(seconds)
                print(f"{variant}: {seconds:.2f} s", flush=True)
    names = list(variants)
    baseline, one, pooled = (times[v] for v in names)
    ratios = [b / p for b, p in zip(baseline, pooled)]
    rows = [
        f"| {v} | {statistics.median(times[v]):.2f} | "
        f"{args.files / statistics.median(times[v]):,.0f} | "
        f"{', '.join(f'{t:.2f}' for t in times[v])} |"
        for v in names
    ]
    ratio = statistics.median(ratios)
    command = "python -m benchmarks.export" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    section = "\n".join(
        [
            HEADING,
            "",
            f"`{command}` ({time.strftime('%Y-%m-%d', time.gmtime())}): checkpoint 1 of a "
            f"ValueState with one file in each of {args.files:,} key groups ({table.bytes:,} "
            f"bytes) on the S3 test server (moto on loopback, as `tests/object_store` runs it; "
            "it applies writes one at a time), exported with `take_savepoint` into a fresh "
            f"folder of the same bucket, {args.repeats} repetitions, variants alternating; "
            "each export read back equal to the checkpoint. Machine: "
            + "; ".join(f"{k} {v}" for k, v in machine.items())
            + ".",
            "",
            "| variant | seconds (median) | files/s | runs (s) |",
            "|---|---:|---:|---|",
            *rows,
            "",
            f"The export against the one-file-at-a-time copy, paired by repetition: "
            f"**{ratio:.1f}x** faster (runs: {', '.join(f'{r:.1f}' for r in ratios)}; "
            f"target at least 5x: {'met' if min(ratios) >= 5 else '**not met**'}). One "
            f"thread of today's copy: {statistics.median(baseline) / statistics.median(one):.1f}x "
            "(one listing instead of a HEAD and a footer read per file, no folder markers).",
            "",
        ]
    )
    print(section)
    if not args.no_record:
        RESULTS.write_text(replace_section(RESULTS.read_text(), HEADING, section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
