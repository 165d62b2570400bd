"""Whether a scheduled ``availableNow`` increment of a streaming job has anything new to read.

An hourly streaming DAG whose input arrives a few times a day should not start Spark every hour.
Before it submits the query, the DAG notes **the input as it sees it**: the input folder's files
(:func:`input_listing`: path, size and modification time) or the Kafka topic's end offsets
(partition -> offset). A run whose query then succeeded records that note in the query's
checkpoint location (:func:`record_input_read`,
``<checkpoint_location>/_statecore/input_read.json``): an ``availableNow`` query takes
everything there when it starts, so all the note names was read by that run. The next run
compares what it sees with that record (:func:`new_files`, :func:`new_offsets`) and submits only
if something is not in it.

Nothing is ever left unread by a skip: a file or record that arrives after a run noted its
input (during its query or after) is not in that run's record, so the next run submits; a run
that failed records nothing, so the next one submits too; and the record lives with Spark's
checkpoint, so a query started afresh (its location removed) starts without one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from statecore.ops.streams import read_record, write_record
from statecore.snapshot.files import table_filesystem

__all__ = [
    "INPUT_READ",
    "InputRead",
    "input_listing",
    "new_files",
    "new_offsets",
    "read_input_read",
    "record_input_read",
]

INPUT_READ = "input_read.json"
"""The record's file name in ``<checkpoint_location>/_statecore/``."""


@dataclass(frozen=True, kw_only=True)
class InputRead:
    """What a run that succeeded had seen of its input before its query started (all read)."""

    run_id: str
    """The run (an Airflow DAG run's ``<dag_id>/<run_id>``)."""
    source: str
    """The input folder, or ``<bootstrap servers>/<topic>``: another source is all new."""
    files: dict[str, list[int]] = field(default_factory=dict)
    """A file source's listing: path -> ``[size, mtime_ns]``."""
    offsets: dict[str, int] = field(default_factory=dict)
    """A Kafka source's end offsets: partition -> offset."""
    recorded_at: float = field(default_factory=time.time)


def input_listing(input_path: str) -> dict[str, list[int]]:
    """The files a file source at ``input_path`` would take (recursively; names starting with
    ``_`` or ``.`` are not data, as Spark skips them): path -> ``[size, mtime_ns]``. Empty when
    the folder is not there."""
    fs, root = table_filesystem(input_path.rstrip("/"))
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return {
        i.path: [int(i.size or 0), int(i.mtime_ns or 0)]
        for i in infos
        if i.type == pafs.FileType.File
        and not any(part.startswith(("_", ".")) for part in i.path[len(root) :].split("/"))
    }


def new_files(listing: dict[str, list[int]], read: InputRead | None, source: str) -> list[str]:
    """The files of ``listing`` not in ``read`` (new, or changed since), sorted; all of them
    when nothing was recorded or the record is of another source."""
    if read is None or read.source != source:
        return sorted(listing)
    return sorted(path for path, seen in listing.items() if read.files.get(path) != list(seen))


def new_offsets(end: dict[str, int], read: InputRead | None, source: str) -> dict[str, int]:
    """The partitions whose end offset in ``end`` is past the recorded one (a partition not
    recorded counts from 0), with their end offsets; all non-empty ones when nothing was
    recorded or the record is of another source."""
    recorded = read.offsets if read is not None and read.source == source else {}
    return {p: o for p, o in sorted(end.items()) if o > recorded.get(p, 0)}


def record_input_read(checkpoint_location: str, read: InputRead) -> None:
    """Replace the record of the input the last successful run had read."""
    write_record(checkpoint_location, INPUT_READ, read)


def read_input_read(checkpoint_location: str) -> InputRead | None:
    """The record :func:`record_input_read` last wrote there, else ``None``."""
    return read_record(checkpoint_location, INPUT_READ, InputRead)
