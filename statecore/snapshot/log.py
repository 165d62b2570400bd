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
Old log files are never deleted here (see :mod:`statecore.snapshot.rewrite` for VACUUM, which
only deletes data files), so time travel to every version a catalog checkpoint names keeps working.
"""

from __future__ import annotations

import json
import logging

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from statecore.snapshot.commits import head_version
from statecore.snapshot.files import table_filesystem

__all__ = ["LOG_CHECKPOINT_INTERVAL", "checkpoint_log", "last_log_checkpoint", "log_replay_length"]

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


def checkpoint_log(
    table: DeltaTable, uri: str, *, interval: int = LOG_CHECKPOINT_INTERVAL
) -> int | None:
    """Write a log checkpoint of ``table`` (opened at its latest version, just committed) when
    ``interval`` or more commits came after the last one; the version checkpointed, or ``None``.
    A failure is logged, never raised: the commit it follows is complete without it."""
    version = table.version()
    last = last_log_checkpoint(uri)
    if version - (0 if last is None else last) < interval:  # version 0 creates the table
        return None
    try:
        table.create_checkpoint()
    except (DeltaError, OSError) as exc:
        log.warning("log checkpoint of %s at version %s failed: %s", uri, version, exc)
        return None
    return version
