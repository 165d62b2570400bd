"""Pending output, staged where no Delta tool deletes or lists it, and put into its table only at
the commit.

A task writes its output (and late-data) files into a *staging folder* outside the table (the
caller names it: ``<warehouse>/_pending_outputs/<job>/<checkpoint>/<kind>/``, beside the
checkpoint's record), never into the table's folder: an untracked file in a table's folder is
what Delta's VACUUM deletes (delta-spark ``VACUUM``, deltalake ``DeltaTable.vacuum``, once past
their retention, at once with retention 0), and a table's folder is what every Delta tool lists.
The staged copy is the source of truth until the committed table is verified to hold every file:

1. :func:`place_files`: each file is copied into the table's folder (server-side on one S3
   endpoint, a local copy on one machine, else streamed), unless a copy of the recorded size
   is there already (an earlier attempt placed it). A copy, not a move: the staged file stays,
   and the copy's modification time is new, so a VACUUM with a retention of hours or days
   leaves it alone. A file that is neither staged nor in the table at its recorded size is
   :class:`~statecore.errors.OutputFilesMissingError`, naming each one; nothing is committed.
2. the Delta commit (the caller's, idempotent by its application transaction);
3. :func:`verify_placed`: every file is in the table's folder at its recorded size; a VACUUM
   with retention 0 that ran between 1 and 2 deleted a placed copy, which is copied again from
   the staged one (a reader between 2 and this repair meets the missing file for that moment);
   a file gone from both is :class:`~statecore.errors.OutputFilesMissingError`;
4. :func:`drop_staged`: the staged files are deleted.

Files recorded without a staged copy (``OutputFile.staged`` empty) were written by statecore
before it staged output, into the table's folder: they are committed where they are if they are
still there at their size, else the error names them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs

from statecore.errors import OutputFilesMissingError
from statecore.snapshot.copies import file_copier
from statecore.snapshot.storage import is_s3, table_filesystem, throttling_hint

__all__ = ["StagedFile", "drop_staged", "file_sizes", "place_files", "verify_placed"]

_THREADS = 4


@dataclass(frozen=True)
class StagedFile:
    """One pending output file: ``path`` relative to the table, its recorded ``size``, and the
    URI of its staged copy (``None``: written into the table's folder, as before staging)."""

    path: str
    size: int
    staged: str | None


def file_sizes(uris: Iterable[str]) -> dict[str, int | None]:
    """The size of each file at ``uris`` (``None``: not there)."""
    out: dict[str, int | None] = {}
    grouped: dict[str, list[str]] = {}
    for uri in uris:
        folder, _, name = uri.rpartition("/")
        grouped.setdefault(folder, []).append(name)
    for folder, names in grouped.items():
        fs, root = table_filesystem(folder)
        infos = fs.get_file_info([f"{root}/{name}" for name in names])
        for name, info in zip(names, infos):
            found = info.type == pafs.FileType.File
            out[f"{folder}/{name}"] = info.size if found else None
    return out


def _in_table(uri: str, path: str) -> str:
    return f"{uri.rstrip('/')}/{path}"


def _describe(uri: str, f: StagedFile, sizes: dict[str, int | None]) -> str:
    table_size = sizes.get(_in_table(uri, f.path))
    if f.staged is None:
        where = "written into the table's folder by an earlier statecore (no staged copy)"
    else:
        staged_size = sizes.get(f.staged)
        where = (
            f"staged copy {f.staged} is gone"
            if staged_size is None
            else f"staged copy {f.staged} has {staged_size} bytes"
        )
    there = "not in the table" if table_size is None else f"{table_size} bytes in the table"
    return f"{_in_table(uri, f.path)} ({f.size} bytes recorded; {there}; {where})"


def _missing_error(
    where: str,
    uri: str,
    missing: list[StagedFile],
    sizes: dict[str, int | None],
    *,
    committed: bool,
) -> OutputFilesMissingError:
    listed = "\n  ".join(_describe(uri, f, sizes) for f in missing)
    if committed:
        outcome = (
            "its commit is in the table's log already: readers of the table fail on these "
            "files until they are restored"
        )
    else:
        outcome = "nothing was committed: the table does not point at them"
    return OutputFilesMissingError(
        f"{where}: {len(missing)} pending output file(s) are gone from their staging folder "
        f"and from the table; {outcome}. Missing:\n  {listed}"
    )


def _copy(uri: str, files: Sequence[StagedFile], where: str) -> None:
    """Copy the staged copies of ``files`` into the table's folder."""
    if not files:
        return
    if not is_s3(uri):  # object stores have no folders
        fs, root = table_filesystem(uri)
        fs.create_dir(root, recursive=True)
    by_folder: dict[str, list[StagedFile]] = {}
    for f in files:
        assert f.staged is not None
        by_folder.setdefault(f.staged.rpartition("/")[0], []).append(f)
    for folder, group in by_folder.items():
        copy = file_copier(folder, uri, _THREADS)
        for f in group:
            assert f.staged is not None
            try:
                copy(f.staged.rpartition("/")[2], f.path, f.size)
            except OSError as exc:
                raise OSError(
                    f"{where}: {f.staged} cannot be copied into the table: {exc}"
                    f"{throttling_hint(exc)}"
                ) from exc


def _sizes(uri: str, files: Sequence[StagedFile]) -> dict[str, int | None]:
    wanted = [_in_table(uri, f.path) for f in files]
    wanted += [f.staged for f in files if f.staged is not None]
    return file_sizes(wanted)


def _to_copy(
    uri: str, files: Sequence[StagedFile], sizes: dict[str, int | None]
) -> tuple[list[StagedFile], list[StagedFile]]:
    """Of ``files`` not in the table at their size: those to copy from their staged copy, and
    those missing (no staged copy of that size either)."""
    copy, missing = [], []
    for f in files:
        if sizes.get(_in_table(uri, f.path)) == f.size:
            continue
        if f.staged is not None and sizes.get(f.staged) == f.size:
            copy.append(f)
        else:
            missing.append(f)
    return copy, missing


def place_files(uri: str, files: Sequence[StagedFile], *, where: str) -> None:
    """Step 1: every file of ``files`` in the table at ``uri`` at its recorded size, copied from
    its staged copy where needed; :class:`OutputFilesMissingError` (nothing copied) when one is
    neither there nor staged at that size."""
    sizes = _sizes(uri, files)
    copy, missing = _to_copy(uri, files, sizes)
    if missing:
        raise _missing_error(where, uri, missing, sizes, committed=False)
    _copy(uri, copy, where)


def verify_placed(
    uri: str,
    files: Sequence[StagedFile],
    *,
    where: str,
    referenced: Callable[[], set[str]],
) -> list[StagedFile]:
    """Step 3, after the commit: every file the table still references (``referenced()``: the
    paths of its latest version, read only when a file is not there) is in its folder at its
    recorded size, copied again from its staged copy when not (a VACUUM raced the commit);
    the files repaired. A file the table no longer references was removed by a later commit
    (a merge of old checkpoints' files): nothing to do. :class:`OutputFilesMissingError` when
    one is gone with its staged copy."""
    sizes = _sizes(uri, files)
    copy, missing = _to_copy(uri, files, sizes)
    if not copy and not missing:
        return []
    live = referenced()
    copy = [f for f in copy if f.path in live]
    missing = [f for f in missing if f.path in live]
    if missing:
        raise _missing_error(where, uri, missing, sizes, committed=True)
    _copy(uri, copy, where)
    return copy


def drop_staged(files: Iterable[StagedFile]) -> None:
    """Step 4: delete the staged copies (gone already: nothing to do)."""
    for f in files:
        if f.staged is None:
            continue
        fs, path = table_filesystem(f.staged)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass
