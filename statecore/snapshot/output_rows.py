"""A completed checkpoint's rows in its output table, found through the Delta log.

Each checkpoint's output is one Delta commit whose ``commitInfo`` names the checkpoint
(:data:`~statecore.snapshot.table.CHECKPOINT_METADATA`). That commit's ``add`` actions are the
files holding exactly its rows, whatever they are called, so the rows are found by the log,
never by file names, and Delta's own maintenance by any tool is taken into account:

- a file still in the table's latest version holds the checkpoint's rows as committed;
- a file removed with ``dataChange=false`` (``OPTIMIZE``, Z-order, statecore's own merge of
  expired checkpoints) still holds those rows while it is on storage (until a VACUUM), since
  such a rewrite changes no row;
- otherwise the rows cannot be read alone any more: rewritten into other files and the
  originals VACUUMed, or removed by a data change (``RESTORE`` to an earlier version,
  ``DELETE``, ``MERGE``). :class:`~statecore.errors.OutputRowsUnavailableError` then names the
  checkpoint and the Delta operation (and its version) that changed them: an answer is never
  an empty result that only looks like "no rows".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake.exceptions import DeltaError, TableNotFoundError

from statecore.errors import OutputRowsUnavailableError
from statecore.snapshot.commits import head_version
from statecore.snapshot.files import table_filesystem
from statecore.snapshot.storage import open_table
from statecore.snapshot.table import CHECKPOINT_METADATA

__all__ = ["CheckpointCommit", "checkpoint_commits", "checkpoint_output_uris"]


@dataclass(frozen=True)
class CheckpointCommit:
    """The commit at ``version`` of an output table holding checkpoint ``checkpoint_id``'s
    rows in the files ``paths`` (relative to the table's root)."""

    version: int
    checkpoint_id: int
    paths: tuple[str, ...]


@dataclass(frozen=True)
class _Removal:
    version: int
    operation: str
    data_change: bool


def _actions(fs: pafs.FileSystem, root: str, version: int) -> list[dict[str, Any]] | None:
    """The actions of the commit ``version`` (``None``: no such commit file, or cleaned up)."""
    try:
        with fs.open_input_stream(f"{root}/_delta_log/{version:020d}.json") as f:
            text = f.read().decode()
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _commit_of(actions: list[dict[str, Any]], version: int) -> CheckpointCommit | None:
    for action in actions:
        info = action.get("commitInfo")
        if isinstance(info, dict) and info.get(CHECKPOINT_METADATA) is not None:
            paths = tuple(unquote(a["add"]["path"]) for a in actions if "add" in a)
            return CheckpointCommit(version, int(info[CHECKPOINT_METADATA]), paths)
    return None


def checkpoint_commits(uri: str, *, since: int = 0) -> Iterator[CheckpointCommit]:
    """The checkpoint commits of the output (or late-data) table at ``uri`` from version
    ``since`` on, oldest first (none while there is no table). The log is listed once: the
    entries its cleanup deleted are not asked for one by one."""
    head = head_version(uri)
    if head is None:
        return
    fs, root = table_filesystem(uri)
    listed = fs.get_file_info(pafs.FileSelector(f"{root}/_delta_log"))
    names = (e.path.rsplit("/", 1)[-1] for e in listed)
    versions = sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())
    for version in versions:
        if since <= version <= head:
            actions = _actions(fs, root, version)
            if actions is not None and (commit := _commit_of(actions, version)) is not None:
                yield commit


def _find_commit(
    fs: pafs.FileSystem, root: str, head: int, checkpoint_id: int
) -> tuple[CheckpointCommit | None, bool]:
    """The commit of ``checkpoint_id`` read from the newest version down (checkpoint commits
    are made in checkpoint order), and whether the log answered: ``False`` when the commits
    below the newest ones were cleaned up before a commit at or below the checkpoint was met."""
    for version in range(head, -1, -1):
        actions = _actions(fs, root, version)
        if actions is None:
            return None, False
        commit = _commit_of(actions, version)
        if commit is None:
            continue
        if commit.checkpoint_id == checkpoint_id:
            return commit, True
        if commit.checkpoint_id < checkpoint_id:
            return None, True
    return None, True


def _removals(
    fs: pafs.FileSystem, root: str, after: int, head: int, paths: set[str]
) -> dict[str, _Removal]:
    """Which later commit removed each of ``paths`` last (an ``add`` again forgets it: a
    RESTORE may bring a file back)."""
    found: dict[str, _Removal] = {}
    for version in range(after + 1, head + 1):
        actions = _actions(fs, root, version) or []
        operation = next(
            (
                str(a["commitInfo"].get("operation", "an unnamed commit"))
                for a in actions
                if isinstance(a.get("commitInfo"), dict)
            ),
            "an unnamed commit",
        )
        for action in actions:
            if "remove" in action and (path := unquote(action["remove"]["path"])) in paths:
                change = bool(action["remove"].get("dataChange", True))
                found[path] = _Removal(version, operation, change)
            elif "add" in action:
                found.pop(unquote(action["add"]["path"]), None)
    return found


def checkpoint_output_uris(uri: str, checkpoint_id: int) -> list[str]:
    """URIs of the files holding exactly the rows checkpoint ``checkpoint_id`` committed to
    the output (or late-data) table at ``uri``; ``[]`` when it committed none (no rows, or no
    table). Raises :class:`~statecore.errors.OutputRowsUnavailableError` when the rows were
    committed but cannot be read alone any more, naming the Delta operation that changed them."""
    where = f"checkpoint {checkpoint_id}: the output table {uri}"
    try:
        table = open_table(uri)
    except TableNotFoundError:
        return []
    except (DeltaError, OSError) as exc:
        raise OutputRowsUnavailableError(f"{where} cannot be opened: {exc}") from exc
    head = table.version()
    fs, root = table_filesystem(uri)
    commit, answered = _find_commit(fs, root, head, checkpoint_id)
    if commit is None:
        if answered:
            return []
        raise OutputRowsUnavailableError(
            f"{where}: the Delta log no longer holds the commit of this checkpoint (its log "
            "entries were cleaned up), so its rows cannot be told from the others"
        )
    current = set(
        unquote(p) for p in pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    )
    gone = {p for p in commit.paths if p not in current}
    removed = _removals(fs, root, commit.version, head, gone) if gone else {}
    base = uri.rstrip("/")
    uris = []
    for path in commit.paths:
        change = removed.get(path)
        if change is not None:
            _check_readable(fs, f"{root}/{path}", change, where, commit.version)
        uris.append(f"{base}/{path}")
    return uris


def _check_readable(
    fs: pafs.FileSystem, path: str, change: _Removal, where: str, committed: int
) -> None:
    """Raise unless the removed file at ``path`` still holds the checkpoint's rows unchanged."""
    changed = f"{change.operation} at version {change.version}"
    if change.data_change:
        raise OutputRowsUnavailableError(
            f"{where}: the rows it committed at version {committed} were removed from the table "
            f"by {changed} (a data change, e.g. a RESTORE to an earlier version); statecore "
            "does not add them back"
        )
    if fs.get_file_info(path).type != pafs.FileType.File:
        raise OutputRowsUnavailableError(
            f"{where}: the rows it committed at version {committed} were rewritten into other "
            f"files by {changed} (their rows are still in the table) and the original files "
            "were then deleted by a VACUUM, so they cannot be read back alone"
        )
