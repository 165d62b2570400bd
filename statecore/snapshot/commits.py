"""The Delta logs as evidence: what each snapshot commit records about itself, read back.

Every commit statecore makes to a table of a job carries the Delta application transaction
``(job/operator/state, checkpoint id)`` and, as Delta commit metadata (``commitInfo``), what the
checkpoint catalog needs to know about it (:class:`CommitMetadata`): the checkpoint, the state's
kind, descriptor, schema and TTL, the parallelism and max parallelism. A catalog that was lost,
or is behind the tables, can then be checked and rebuilt from the tables alone, as Flink
recovers a job from its checkpoint directory.

:func:`live_commits` reads one table's history: the statecore commits its latest version builds
on (a ``RESTORE`` to version ``b`` undoes the commits after ``b``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow.fs as pafs
from deltalake.exceptions import DeltaError, TableNotFoundError

from statecore.errors import CorruptSnapshotError
from statecore.snapshot.files import table_filesystem
from statecore.snapshot.storage import open_table

__all__ = [
    "CommitMetadata",
    "TableCommit",
    "head_version",
    "job_table_uris",
    "last_commit",
    "live_commits",
]

_PREFIX = "statecore."
_FIELDS = (
    "checkpoint_id",
    "operator",
    "state",
    "table_kind",
    "kind",
    "schema",
    "descriptor",
    "ttl",
    "parallelism",
    "max_parallelism",
)


@dataclass(frozen=True, kw_only=True)
class CommitMetadata:
    """What one commit of a state's table tells about its checkpoint and its state."""

    checkpoint_id: int
    operator: str
    state: str
    table_kind: str
    kind: str
    schema: str
    descriptor: dict[str, Any]
    ttl: dict[str, Any] | None
    parallelism: int
    max_parallelism: int
    watermark: int | None = None
    """The event-time watermark (epoch ms) the checkpoint completes with (optional: commits
    of older statecores and of maintenance operations may not name it)."""

    def to_properties(self) -> dict[str, str]:
        """The commit's ``custom_metadata`` (string values, prefixed ``statecore.``)."""
        values: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        values["descriptor"] = json.dumps(self.descriptor, sort_keys=True)
        values["ttl"] = json.dumps(self.ttl, sort_keys=True)
        if self.watermark is not None:
            values["watermark"] = self.watermark
        return {f"{_PREFIX}{name}": str(value) for name, value in values.items()}

    @classmethod
    def from_commit_info(cls, info: dict[str, Any]) -> CommitMetadata | None:
        """The metadata of a commit (an entry of ``DeltaTable.history()``), ``None`` if it has
        none (not a statecore snapshot commit)."""
        if f"{_PREFIX}checkpoint_id" not in info:
            return None
        try:
            raw = {name: info[f"{_PREFIX}{name}"] for name in _FIELDS}
            return cls(
                checkpoint_id=int(raw["checkpoint_id"]),
                operator=str(raw["operator"]),
                state=str(raw["state"]),
                table_kind=str(raw["table_kind"]),
                kind=str(raw["kind"]),
                schema=str(raw["schema"]),
                descriptor=json.loads(raw["descriptor"]),
                ttl=json.loads(raw["ttl"]),
                parallelism=int(raw["parallelism"]),
                max_parallelism=int(raw["max_parallelism"]),
                watermark=(
                    None
                    if info.get(f"{_PREFIX}watermark") is None
                    else int(info[f"{_PREFIX}watermark"])
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptSnapshotError(
                f"commit {info.get('version')} has incomplete statecore metadata: {exc}"
            ) from exc


@dataclass(frozen=True, kw_only=True)
class TableCommit:
    """One statecore commit of the table at ``uri``."""

    uri: str
    version: int
    timestamp: datetime
    metadata: CommitMetadata


def _history(uri: str) -> list[dict[str, Any]]:
    try:
        return sorted(open_table(uri).history(), key=lambda entry: int(entry["version"]))
    except (TableNotFoundError, DeltaError, OSError) as exc:
        raise CorruptSnapshotError(
            f"snapshot table {uri}: its Delta log cannot be read: {exc}"
        ) from exc


def _commit(uri: str, entry: dict[str, Any]) -> TableCommit | None:
    try:
        metadata = CommitMetadata.from_commit_info(entry)
    except CorruptSnapshotError as exc:
        raise CorruptSnapshotError(f"snapshot table {uri}: {exc}") from exc
    if metadata is None:
        return None
    return TableCommit(
        uri=uri,
        version=int(entry["version"]),
        timestamp=datetime.fromtimestamp(int(entry["timestamp"]) / 1000, UTC),
        metadata=metadata,
    )


def live_commits(uri: str) -> tuple[list[TableCommit], list[int]]:
    """The statecore commits the table's latest version builds on, oldest first, and the
    versions that changed data without statecore metadata (written by an older statecore or by
    another writer)."""
    live: list[TableCommit] = []
    unrecorded: list[int] = []
    for entry in _history(uri):
        version = int(entry["version"])
        if entry.get("operation") == "RESTORE":
            back_to = int(entry.get("operationParameters", {}).get("version", version))
            live = [c for c in live if c.version <= back_to]
            unrecorded = [v for v in unrecorded if v <= back_to]
            continue
        commit = _commit(uri, entry)
        if commit is not None:
            live.append(commit)
        elif entry.get("operation") != "CREATE TABLE":
            unrecorded.append(version)
    return live, unrecorded


def head_version(uri: str) -> int | None:
    """The table's latest version from the names of its commit files (``_delta_log/<20 digit
    version>.json``, as the Delta protocol names them): one listing, no log replay. ``None``
    when there is no table."""
    fs, root = table_filesystem(uri)
    try:
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/_delta_log", allow_not_found=True))
    except OSError:
        return None
    versions = [
        int(i.base_name[:20])
        for i in infos
        if len(i.base_name) == 25 and i.base_name.endswith(".json") and i.base_name[:20].isdigit()
    ]
    return max(versions, default=None)


def last_commit(uri: str) -> tuple[int | None, TableCommit | None]:
    """The table's latest version (``None``: no table) and its newest statecore commit."""
    try:
        table = open_table(uri)
        history = table.history(limit=4)
    except (TableNotFoundError, DeltaError, OSError):
        return None, None
    for entry in sorted(history, key=lambda e: -int(e["version"])):
        commit = _commit(uri, entry)
        if commit is not None:
            return table.version(), commit
    return table.version(), None


def _folders(fs: pafs.FileSystem, path: str) -> list[str]:
    selector = pafs.FileSelector(path, allow_not_found=True)
    return sorted(
        i.path
        for i in fs.get_file_info(selector)
        if i.type == pafs.FileType.Directory and not i.base_name.startswith(("_", "."))
    )


def _is_table(fs: pafs.FileSystem, path: str) -> bool:
    return bool(fs.get_file_info(f"{path}/_delta_log").type == pafs.FileType.Directory)


def job_table_uris(warehouse: str, job: str) -> list[str]:
    """Every Delta table below ``<warehouse>/<job>/`` (``<operator>/<kind>/<state>`` and
    ``<operator>/timers``), whether a checkpoint names it or not."""
    root_uri = f"{warehouse.rstrip('/')}/{job}"
    fs, root = table_filesystem(root_uri)
    prefix = root_uri[: len(root_uri) - len(root)] if root_uri.endswith(root) else ""
    found = []
    for operator in _folders(fs, root):
        for child in _folders(fs, operator):
            if _is_table(fs, child):
                found.append(child)
                continue
            found += [state for state in _folders(fs, child) if _is_table(fs, state)]
    return [prefix + path for path in found]
