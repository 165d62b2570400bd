"""An incremental commit of a state table written by statecore itself, at the cost of what it
changes.

delta-rs's ``create_write_transaction`` costs time in proportion to the table, not to the
commit: it replays the new actions into the table's whole file list after committing, and the
``update_incremental()`` that brings the ``DeltaTable`` to the new version does it again (each
~30 ms at 32,768 files here, against ~2.5 ms at 1,024; ``benchmarks/SCALE.md``). The driver of
a stream commits the same tables every micro-batch and already knows each table's files by key
group (:mod:`statecore.snapshot.open_tables`), so a commit that only replaces some key groups
(or appends changes) needs none of that: :func:`write_commit` writes the commit's log entry,
``_delta_log/<version>.json``, with its ``remove`` and ``add`` actions, its application
transactions and its metadata, exactly as delta-rs would, and only if that version is not there
yet: on a local disk by a hard link (which fails if the name exists, as delta-rs's own
local commits are made), on S3 by a conditional put (``If-None-Match: *``, as delta-rs 1.x
commits there; :func:`statecore.snapshot.s3_copy.put_if_absent`). A version that is there
already means another writer committed since: the caller falls back to delta-rs's commit,
which brings the table up to date, checks the fence and restores the base version as before.

Only tables of the protocol statecore creates (reader 1, writer 2, no table features) whose
schema is the commit's, on a local disk or S3, and only paths made of characters that need no
escaping in a Delta log, are committed this way (:func:`can_write`); anything else goes through
delta-rs. A log checkpoint is still written every :data:`statecore.snapshot.log.
LOG_CHECKPOINT_INTERVAL` commits, by delta-rs, and costs what it did.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence

import deltalake
from deltalake import DeltaTable

from statecore.snapshot.files import SnapshotFile
from statecore.snapshot.storage import S3Settings, is_s3

__all__ = ["can_write", "commit_entry", "write_commit"]

_SAFE_PATH = re.compile(r"^[A-Za-z0-9._=/-]+$")
ENGINE = f"statecore (delta-rs:py-{deltalake.__version__} log format)"


def can_write(uri: str, table: DeltaTable, partition: str, schema_json: str) -> bool:
    """Whether a commit to the table at ``uri`` (``table`` opened on it, at any version of
    the same protocol and schema) can be written by :func:`write_commit`."""
    if "://" in uri and not is_s3(uri):
        return False
    protocol = table.protocol()
    if protocol.min_reader_version > 1 or protocol.min_writer_version > 2:
        return False
    if protocol.reader_features or protocol.writer_features:
        return False
    metadata = table.metadata()
    return list(metadata.partition_columns) == [partition] and table.schema().to_json() == (
        schema_json
    )


def safe_paths(paths: Iterable[str]) -> bool:
    """Whether every path can be written into a log entry as it is (no escaping needed)."""
    return all(_SAFE_PATH.match(p) for p in paths)


def commit_entry(
    *,
    partition: str,
    removes: Sequence[tuple[int, str, int]],
    adds: Sequence[SnapshotFile],
    transactions: Mapping[str, int],
    metadata: Mapping[str, str],
) -> bytes:
    """The log entry of a commit that removes ``removes`` (``(partition value, path, size)``)
    and adds ``adds``, with the application ``transactions`` (``app id -> version``) and
    ``metadata`` in its ``commitInfo``, as delta-rs writes an append with removes."""
    now = time.time_ns() // 1_000_000
    info = {
        "timestamp": now,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": json.dumps([partition])},
        "engineInfo": ENGINE,
        "clientVersion": ENGINE,
        **metadata,
    }
    lines = [json.dumps({"commitInfo": info})]
    lines += [
        json.dumps(
            {
                "remove": {
                    "path": path,
                    "dataChange": True,
                    "deletionTimestamp": now,
                    "extendedFileMetadata": True,
                    "partitionValues": {partition: str(value)},
                    "size": size,
                }
            }
        )
        for value, path, size in removes
    ]
    lines += [
        json.dumps(
            {
                "add": {
                    "path": f.path,
                    "partitionValues": {partition: str(f.key_group)},
                    "size": f.size,
                    "modificationTime": f.modification_time,
                    "dataChange": True,
                    "stats": f.stats,
                }
            }
        )
        for f in adds
    ]
    lines += [
        json.dumps({"txn": {"appId": app, "version": version, "lastUpdated": now}})
        for app, version in transactions.items()
    ]
    return ("\n".join(lines) + "\n").encode()


def write_commit(uri: str, version: int, entry: bytes) -> bool:
    """Write ``entry`` as version ``version`` of the table at ``uri`` if no commit of that
    version is there; whether it was written (``False``: another writer's commit is)."""
    name = f"_delta_log/{version:020d}.json"
    if is_s3(uri):
        from statecore.snapshot.s3_copy import put_if_absent, s3_client

        return put_if_absent(
            s3_client(S3Settings.from_env(), 1), f"{uri.rstrip('/')}/{name}", entry
        )
    root = uri.removeprefix("file://")
    target = os.path.join(root, name)
    temporary = os.path.join(root, "_delta_log", f".{version:020d}.json.{uuid.uuid4().hex}.tmp")
    with open(temporary, "wb") as f:
        f.write(entry)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(temporary, target)  # fails when the name exists: never replaces a commit
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)
    return True
