"""The driver's state tables kept open across checkpoints, with their files by key group.

Opening a Delta table replays its log (a log checkpoint and up to ten JSON commits: ~2 s at
32,768 files), and an incremental commit must remove the changed key groups' files of the base
version. A stream's driver commits the same tables every micro-batch, so after a commit it
keeps the table (``DeltaTable``, brought up to date with ``update_incremental()``, which reads
only the commits after its version) and the new version's files by key group, built from the
base version's map and the commit's own removes and adds. The next commit on that version
builds its removes from the changed key groups' entries alone, without listing the table, and
the next restore plan of that version reads its files from the map, without opening the table.

An entry describes exactly one version of one table: a table that moved on (another writer's
commit, a rollback's RESTORE, a compaction) is at another version, and its map is built again
from the table's files. An entry is used only while its version's commit file is the one it
saw (:func:`commit_stamp`: its size and modification time), so a table deleted and created
again at the same place (a job deleted and started anew) is opened afresh, and only with the
storage settings it was opened with (``STATECORE_S3_MAX_ATTEMPTS`` and the other S3 settings
of the environment: a table opened before they changed is opened again). At most
:data:`MAX_OPEN` tables are kept (the least recently used are dropped). An entry is taken out
while a commit uses it, so two commits in one process never share one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow.fs as pafs
from deltalake import DeltaTable

from statecore.snapshot.reads import TableFile
from statecore.snapshot.storage import storage_options, table_filesystem

__all__ = ["MAX_OPEN", "OpenTable", "commit_stamp", "forget", "keep", "peek", "take"]

MAX_OPEN = 64
"""How many tables a driver keeps open (each holds its files' entries, ~200 bytes a file)."""


@dataclass(frozen=True)
class OpenTable:
    """``table`` (open at ``version``) and the files of that version, by key group (or
    subtask)."""

    table: DeltaTable
    version: int
    files: Mapping[int, tuple[TableFile, ...]]
    stamp: tuple[int, int] | None = None
    epochs: Mapping[str, int] = field(default_factory=dict)
    """The newest version of each application transaction committed after ``table``'s own
    version by :mod:`statecore.snapshot.log_commit` (``table`` is not brought up to date after
    such a commit: a fence is checked against both)."""

    def after(
        self,
        version: int,
        removed: Iterable[int],
        added: Iterable[tuple[int, str, int, int]],
        *,
        replace_all: bool = False,
    ) -> OpenTable:
        """The entry of ``version``, committed on this one: ``removed`` key groups' files
        removed, then ``added`` ``(key_group, path, rows, size)`` added (all files replaced
        with ``replace_all``)."""
        files: dict[int, tuple[TableFile, ...]] = {} if replace_all else dict(self.files)
        for key_group in removed:
            files.pop(key_group, None)
        for key_group, path, rows, size in added:
            files[key_group] = (*files.get(key_group, ()), TableFile(path, key_group, rows, size))
        return OpenTable(self.table, version, files, epochs=self.epochs)

    def transaction_version(self, app_id: str) -> int | None:
        """The newest version of the application transaction ``app_id`` in this entry's
        version."""
        known = [self.table.transaction_version(app_id), self.epochs.get(app_id)]
        return max((v for v in known if v is not None), default=None)

    def current(self, uri: str) -> bool:
        """Whether the table at ``uri`` still has this entry's version as it was."""
        return self.stamp is not None and commit_stamp(uri, self.version) == self.stamp


def commit_stamp(uri: str, version: int) -> tuple[int, int] | None:
    """The size and modification time (ns) of the commit file of ``version`` of the table at
    ``uri`` (one HEAD request); ``None`` when it is not there."""
    fs, root = table_filesystem(uri)
    try:
        info = fs.get_file_info(f"{root}/_delta_log/{version:020d}.json")
    except OSError:
        return None
    if info.type != pafs.FileType.File or info.size is None or info.mtime_ns is None:
        return None
    return info.size, info.mtime_ns


_Key = tuple[str, tuple[tuple[str, str], ...]]
_open: OrderedDict[_Key, OpenTable] = OrderedDict()
_lock = threading.Lock()


def _key(uri: str) -> _Key:
    """``uri`` with the storage settings a table opened now gets (its retries among them)."""
    return uri, tuple(sorted((storage_options(uri) or {}).items()))


def take(uri: str) -> OpenTable | None:
    """The table kept open at ``uri`` (taken out: :func:`keep` puts it back), if any."""
    with _lock:
        return _open.pop(_key(uri), None)


def peek(uri: str) -> OpenTable | None:
    """The table kept open at ``uri`` (left kept), if any."""
    with _lock:
        return _open.get(_key(uri))


def keep(uri: str, entry: OpenTable) -> None:
    """Keep ``entry`` open for the next commit to ``uri``."""
    key = _key(uri)
    with _lock:
        for other in [k for k in _open if k[0] == uri and k != key]:
            del _open[other]  # opened with other settings
        _open[key] = entry
        _open.move_to_end(key)
        while len(_open) > MAX_OPEN:
            _open.popitem(last=False)


def forget(uri: str | None = None) -> None:
    """Drop what is kept of ``uri`` (of every table when ``None``)."""
    with _lock:
        if uri is None:
            _open.clear()
        else:
            for key in [k for k in _open if k[0] == uri]:
                del _open[key]
