"""Delta log checkpoints, so that opening a table does not replay every commit since its creation.

A Delta reader (delta-rs, DuckDB, Spark) opens a table at the newest log checkpoint named by
``_delta_log/_last_checkpoint`` and replays only the JSON commits after it. statecore commits every
table once per checkpoint, so a stream of micro-batches adds a commit per micro-batch to each
table: without log checkpoints, opening a table after 1,000 micro-batches replays 1,000 commits.
:func:`checkpoint_log` writes one (``DeltaTable.create_checkpoint()``) whenever a commit leaves
:data:`LOG_CHECKPOINT_INTERVAL` or more commits after the last one, as Delta's
``delta.checkpointInterval`` does (its default is 10; delta-rs's own post-commit hook uses 100).
It follows the commits, not version numbers modulo the interval, because a statecore commit may
be preceded by a RESTORE and skip a multiple.

A log checkpoint is an optimization for readers: one that fails is logged and the commit stands.

The log checkpoints are also where the log is cut. :func:`cleanup_log` keeps a table's log
bounded: given the oldest version anything still needs, it finds the newest log checkpoint ``C``
at or below it and deletes the log entries below ``C`` (commit files, older log checkpoints,
their ``.crc`` files), oldest first, never ``C`` nor anything after it. A Delta reader opens any
version ``v >= C`` from the newest log checkpoint at or below ``v`` plus the commits after it,
so every such version still opens, and a cleanup killed midway leaves a shorter prefix to
delete, never a gap at or above ``C``. It also deletes what a logged commit killed between
writing its entry and linking it in left (``.<v>.json.<id>.tmp``). Entries younger than a grace
period (:data:`LOG_GRACE`) are kept whatever the versions, for readers in progress. delta-rs's
``DeltaTable.cleanup_metadata()`` cannot do this: it deletes by age alone
(``delta.logRetentionDuration``), not below a version the checkpoint catalog still names. Its
post-commit hook would do the same after every commit (entries older than 30 days, below the
newest log checkpoint), so every table statecore creates has ``delta.enableExpiredLogCleanup``
``false`` and every statecore commit turns the hook's cleanup off
(:data:`statecore.snapshot.storage.TABLE_PROPERTIES`): this is the only cleanup of the logs.
Which versions are still needed is the retention's business
(:mod:`statecore.checkpoint.retain`); VACUUM (:mod:`statecore.snapshot.rewrite`) deletes data
files only.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from statecore.errors import ConfigError
from statecore.snapshot.commits import head_version
from statecore.snapshot.files import table_filesystem

__all__ = [
    "LOG_CHECKPOINT_INTERVAL",
    "LOG_GRACE",
    "LogCleanup",
    "checkpoint_due",
    "checkpoint_log",
    "cleanup_log",
    "last_log_checkpoint",
    "log_entries",
    "log_replay_length",
]

log = logging.getLogger(__name__)

LOG_CHECKPOINT_INTERVAL = 10
"""Commits after which the next commit writes a log checkpoint (Delta's default interval).

Measured on a 128-key-group table (``benchmarks/RESULTS.md``, "Long-running streams"): writing a
checkpoint costs a few milliseconds, about as much as replaying 10 commits, so a reader never
replays more than 10 commits and the writer pays about 10 % of a commit on average."""


def last_log_checkpoint(uri: str) -> int | None:
    """The version of the table's newest log checkpoint (``_delta_log/_last_checkpoint``), or
    ``None`` when it has none (or no table is there)."""
    fs, root = table_filesystem(uri)
    try:
        with fs.open_input_stream(f"{root}/_delta_log/_last_checkpoint") as f:
            return int(json.loads(f.read())["version"])
    except (FileNotFoundError, OSError, ValueError, KeyError, TypeError):
        return None


def log_replay_length(uri: str) -> int:
    """How many JSON commits a reader replays to open the table's latest version: those after
    its newest log checkpoint (all of them, from version 0, without one)."""
    head = head_version(uri)
    if head is None:
        return 0
    last = last_log_checkpoint(uri)
    return head + 1 if last is None else head - last


def checkpoint_due(uri: str, version: int, *, interval: int = LOG_CHECKPOINT_INTERVAL) -> bool:
    """Whether version ``version`` of the table at ``uri``, just committed, leaves ``interval``
    or more commits after the last log checkpoint (so :func:`checkpoint_log` writes one)."""
    last = last_log_checkpoint(uri)
    return version - (0 if last is None else last) >= interval  # version 0 creates the table


def checkpoint_log(
    table: DeltaTable, uri: str, *, interval: int = LOG_CHECKPOINT_INTERVAL
) -> int | None:
    """Write a log checkpoint of ``table`` (opened at its latest version, just committed) when
    ``interval`` or more commits came after the last one; the version checkpointed, or ``None``.
    A failure is logged, never raised: the commit it follows is complete without it."""
    version = table.version()
    if not checkpoint_due(uri, version, interval=interval):
        return None
    try:
        table.create_checkpoint()
    except (DeltaError, OSError) as exc:
        log.warning("log checkpoint of %s at version %s failed: %s", uri, version, exc)
        return None
    return version


LOG_GRACE = timedelta(hours=1)
"""Log entries younger than this are never deleted, whatever the versions still needed: a
reader that looked a checkpoint up just before retention expired it (a SQL query, a lookup, a
downstream reader of the output table) opens its version well within it. Above the clocks'
possible disagreement (:data:`statecore.ops.retention.MAX_CLOCK_SKEW`, 10 minutes). The log
then holds at most the commits of the retained checkpoints, of the last hour and of one log
checkpoint interval: bounded, however long the stream."""


@dataclass(frozen=True)
class LogCleanup:
    """What :func:`cleanup_log` deleted (or would, in a dry run) from one table's log: the
    entries (relative to the table), and the log checkpoint the log now starts at (``None``
    when nothing was cut)."""

    uri: str
    start: int | None
    files: tuple[str, ...]


def _version(name: str) -> int | None:
    """The (last) version a log entry belongs to: ``<v>.json``, ``<v>.crc``,
    ``<v>.checkpoint[...].parquet``, ``<v>.<w>.compacted.json`` (``w``); ``None`` for anything
    else (``_last_checkpoint``, a commit being written)."""
    parts = name.split(".")
    if len(parts[0]) != 20 or not parts[0].isdigit() or len(parts) < 2:
        return None
    if len(parts) == 2 and parts[1] in ("json", "crc"):
        return int(parts[0])
    if parts[1] == "checkpoint" and parts[-1] == "parquet":
        return int(parts[0])
    if len(parts) == 4 and parts[1].isdigit() and parts[2:] == ["compacted", "json"]:
        return int(parts[1])
    return None


def _old(info: pafs.FileInfo, cutoff: float) -> bool:
    return info.mtime is not None and info.mtime.timestamp() <= cutoff


def log_entries(uri: str) -> dict[str, int]:
    """``{name: version}`` of the versioned entries of the table's ``_delta_log``."""
    fs, root = table_filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/_delta_log", allow_not_found=True))
    found = {i.base_name: _version(i.base_name) for i in infos if i.type == pafs.FileType.File}
    return {name: v for name, v in found.items() if v is not None}


def cleanup_log(
    uri: str,
    oldest_needed: int | Callable[[], int | None],
    *,
    older_than: timedelta = LOG_GRACE,
    dry_run: bool = False,
) -> LogCleanup:
    """Delete the log entries of the table at ``uri`` below its newest log checkpoint at or
    below ``oldest_needed`` (a version, or a function giving it, called only when a cut is
    possible; ``None``: keep everything), oldest first, stopping at the first entry modified
    less than ``older_than`` ago (see the module docstring). Idempotent."""
    if older_than < timedelta(0):
        raise ConfigError(f"log cleanup of {uri}: older_than {older_than} is negative")
    fs, root = table_filesystem(uri)
    folder = f"{root}/_delta_log"
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    entries = [
        (v, i)
        for i in infos
        if i.type == pafs.FileType.File and (v := _version(i.base_name)) is not None
    ]
    cuts = sorted(v for v, i in entries if i.base_name == f"{v:020d}.checkpoint.parquet" and v > 0)
    entries.sort(key=lambda e: (e[0], e[1].base_name))
    cutoff = time.time() - older_than.total_seconds()
    deleted = _delete_leftovers(fs, infos, cutoff, dry_run)
    if not entries or not any(c > entries[0][0] for c in cuts) or not _old(entries[0][1], cutoff):
        return LogCleanup(uri, None, tuple(deleted))  # nothing below a log checkpoint, or too young
    needed = oldest_needed() if callable(oldest_needed) else oldest_needed
    start = max((c for c in cuts if needed is not None and c <= needed), default=None)
    if start is None or start <= entries[0][0]:
        return LogCleanup(uri, None, tuple(deleted))
    leftovers = len(deleted)
    for version, info in entries:
        if version >= start or not _old(info, cutoff):
            break  # too young (or of unknown age): it and everything after it stay
        if not dry_run:
            try:
                fs.delete_file(info.path)
            except FileNotFoundError:  # a cleanup before this one got it
                pass
        deleted.append(f"_delta_log/{info.base_name}")
    return LogCleanup(uri, start if len(deleted) > leftovers else None, tuple(deleted))


def _delete_leftovers(
    fs: pafs.FileSystem, infos: list[pafs.FileInfo], cutoff: float, dry_run: bool
) -> list[str]:
    """Delete the temporary files of logged commits killed between writing their entry and
    linking it in (``.<v>.json.<id>.tmp``, :func:`statecore.snapshot.log_commit.write_commit`)
    that are older than ``cutoff``; what was deleted, relative to the table. No reader reads them
    (not a versioned name); they only take space."""
    deleted = []
    for info in infos:
        name = info.base_name
        if not (name.startswith(".") and name.endswith(".tmp") and ".json." in name):
            continue
        if info.type != pafs.FileType.File or not _old(info, cutoff):
            continue
        if not dry_run:
            try:
                fs.delete_file(info.path)
            except FileNotFoundError:
                pass
        deleted.append(f"_delta_log/{name}")
    return deleted
